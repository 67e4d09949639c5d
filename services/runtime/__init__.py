"""The shell every service runs in: consume → decode → fold → decide → append → ack."""
