"""What a job says: its header, its schedule and series, its conditions (pure)."""
