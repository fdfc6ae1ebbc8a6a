"""GPU cloud hosts: the portal's desired hosts converged into systemd-nspawn containers."""
