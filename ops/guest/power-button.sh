#!/bin/sh
# acpid's handler for the ACPI power button (/etc/acpi/PWRF/00000080): a clean poweroff,
# which busybox init carries out (its shutdown actions, then the kernel powers off).
echo "virtstream-guest: power button: powering off" > /dev/console
exec /bin/poweroff
