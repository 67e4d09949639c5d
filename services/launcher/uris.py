"""The libvirt URI names a launcher and its handler share, without loading libvirt."""

from __future__ import annotations

# the embedded test driver (in memory, private to each launcher process): test mode's name
# everywhere; `hypervisor.connect_uri` says what it opens
TEST_URI = "test:///default"
