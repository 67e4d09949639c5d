#!/bin/sh
# cloud-init for this guest: the seed is an ISO 9660 disk, NoCloud (label cidata: meta-data,
# user-data) or ConfigDrive (label config-2: openstack/latest/{meta_data.json,user_data}).
# meta-data's local-hostname (ConfigDrive's hostname) names the guest. User-data that is a
# script (#!) runs once the network is up. #cloud-config has no YAML parser here: the
# launcher rendered it into virtstream/boot.sh (bootcmd, hostname, users, ssh keys,
# passwords, write_files) and virtstream/final.sh (deferred write_files, runcmd) on the
# seed; boot.sh runs now, final.sh (through /etc/user-data.sh) once the network is up.
seed=""
kind=""
for dev in /dev/vd? /dev/sr? /dev/sd?; do
  [ -b "$dev" ] || continue
  if mount -t iso9660 -o ro "$dev" /mnt/cidata 2>/dev/null; then
    if [ -f /mnt/cidata/meta-data ] || [ -f /mnt/cidata/user-data ]; then
      seed=$dev kind=NoCloud
      break
    fi
    if [ -d /mnt/cidata/openstack/latest ]; then
      seed=$dev kind=ConfigDrive
      break
    fi
    umount /mnt/cidata
  fi
done
: > /etc/user-data.sh
chmod +x /etc/user-data.sh
[ -n "$seed" ] || { echo "cloud-init: no cidata seed"; exit 0; }
echo "cloud-init: $kind seed on $seed"

if [ "$kind" = NoCloud ]; then
  name=$(sed -n 's/^local-hostname:[[:space:]]*//p' /mnt/cidata/meta-data 2>/dev/null \
    | head -n1 | tr -d "\"'\r")
  data=/mnt/cidata/user-data
else
  name=$(sed -n 's/.*"hostname": *"\([^"]*\)".*/\1/p' /mnt/cidata/openstack/latest/meta_data.json \
    2>/dev/null | head -n1)
  data=/mnt/cidata/openstack/latest/user_data
fi
[ -n "$name" ] && hostname "${name%%.*}"
# boot.sh: the image's default user (cloud-init makes it whatever the user-data is) and a
# #cloud-config's boot stage; final.sh its final stage
if [ -f /mnt/cidata/virtstream/boot.sh ]; then
  cp /mnt/cidata/virtstream/boot.sh /etc/cloud-boot.sh
  cp /mnt/cidata/virtstream/final.sh /etc/cloud-final.sh
  sh /etc/cloud-boot.sh
  echo "sh /etc/cloud-final.sh" > /etc/user-data.sh
fi
case "$(head -n1 "$data" 2>/dev/null)" in
  '#!'*)
    cp "$data" /etc/user-script
    chmod +x /etc/user-script
    echo "sh /etc/user-script" >> /etc/user-data.sh
    ;;
  '#cloud-config'*)
    [ -f /mnt/cidata/virtstream/boot.sh ] \
      || echo "cloud-init: #cloud-config without its rendered scripts on the seed"
    ;;
esac
echo "cloud-init: hostname $(hostname)"
umount /mnt/cidata
