// placeholder: filled in by the data/serialization work in progress.
