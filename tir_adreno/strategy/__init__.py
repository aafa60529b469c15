"""Every decision of how an op runs on a device profile: algorithm, kernel config, placement,
precision, weight packing, tuned records (TFLite GPU's ``selectors/``, TVM's ``Target``)."""
