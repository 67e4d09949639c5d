#!/bin/busybox sh
# PID 1 of the virtstream guest (an initramfs: the root file system lives in memory, the
# boot disk is not needed after the boot loader). Sets the guest up the way cloud images
# do, then hands over to busybox init, which keeps a shell on the serial console and tty1.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /run /tmp /mnt/cidata
mount -t devpts devpts /dev/pts
# The first line from userspace: what "guest up" is measured against.
echo "virtstream-guest: init at $(cut -d' ' -f1 /proc/uptime)s uptime"

# Drivers the kernel has as modules (virtio PCI, block, net, console, rng; ISO 9660 for the
# cloud-init seed), in dependency order.
while read -r module; do
  insmod "/lib/modules/$module.ko" 2>/dev/null
done < /lib/modules/load-order
# The ACPI power button powers the guest off (/etc/acpi/PWRF/00000080): a stop with a grace
# period ends as soon as the guest has shut down.
acpid -l /dev/null
# The QEMU guest agent on its virtio-serial port (the domain's org.qemu.guest_agent.0
# channel; busybox has no udev to name /dev/virtio-ports/, so the port is found by name).
mkdir -p /var/run /var/log
syslogd  # /var/log/messages: what the agent and the SSH server report (a freeze, a login)
for port in /sys/class/virtio-ports/*; do
  [ "$(cat "$port/name" 2>/dev/null)" = org.qemu.guest_agent.0 ] || continue
  /usr/sbin/qemu-ga -d -m virtio-serial -p "/dev/${port##*/}" -f /var/run/qemu-ga.pid \
    && echo "virtstream-guest: guest agent on /dev/${port##*/}"
done

hostname virtstream
/etc/cloud-init.sh

# DHCP on each NIC (user-mode networking answers at once); quit without a lease after ~3 s.
for nic in /sys/class/net/*; do
  nic=${nic##*/}
  [ "$nic" = lo ] && continue
  ip link set "$nic" up
  udhcpc -i "$nic" -s /etc/udhcpc.sh -n -q -t 3 -T 1 >/dev/null 2>&1 \
    && echo "virtstream-guest: $nic $(ip -4 -o addr show dev "$nic" | awk '{print $4}')"
done
ip link set lo up
# SSH (dropbear; host keys made at the first connection): what `virtstream ssh` reaches
# through the VMI's portforward subresource.
mkdir -p /etc/dropbear
/usr/sbin/dropbear -R -p 22 && echo "virtstream-guest: ssh on port 22"

/etc/user-data.sh
echo "virtstream-guest: $(hostname) ready (Linux $(uname -r))"
exec /bin/busybox init
