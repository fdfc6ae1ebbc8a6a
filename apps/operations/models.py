"""The console keeps no tables of its own: what it shows and edits belongs to the domain apps."""
