"""The read side: tools that read the event log (the api's projection runner, checkpoints,
time travel, causal chains, verification). The folds they run are pure (`projections/`)."""
