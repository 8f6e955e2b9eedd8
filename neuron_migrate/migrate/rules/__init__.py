"""One module per rule family; every module here is imported by `load_rules()` and its rules register."""
