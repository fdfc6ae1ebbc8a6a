"""Provisioning backends behind one interface; see `base.Driver` and `registry`."""
