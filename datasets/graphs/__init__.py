"""Graph data: the GraphPFN prior's TFDS builder, networkx's karate club, Planetoid citation graphs."""
