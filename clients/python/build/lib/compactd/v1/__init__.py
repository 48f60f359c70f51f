"""Generated from proto/compactd/v1/compactd.proto."""
