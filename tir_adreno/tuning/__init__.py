"""``tir-adreno tune``: conv candidates measured here, on another machine or over TVM's RPC tracker."""
