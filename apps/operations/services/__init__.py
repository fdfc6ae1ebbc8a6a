"""The operator console's use cases that belong to no single domain: acting on tenants'
instances across the park (`instances`), and the back office's reads of tenants (`tenants`)."""
