"""What runs train on: model and dataset discovery, dataset rows and validation, token statistics, the sample."""
