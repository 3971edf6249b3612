"""Generated engine API stubs (make proto)."""
