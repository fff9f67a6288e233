"""Pure-function implementations of the methods (one subpackage each)."""
