#!/bin/sh
# NoCloud, the subset this guest understands: the seed is the disk labelled cidata (an ISO
# 9660 image); meta-data's local-hostname; user-data either a script (#!) or #cloud-config
# with hostname/fqdn, bootcmd and runcmd (strings or flow lists). The user's commands are
# written to /etc/user-data.sh, run once the network is up.
seed=""
for dev in /dev/vd? /dev/sr? /dev/sd?; do
  [ -b "$dev" ] || continue
  if mount -t iso9660 -o ro "$dev" /mnt/cidata 2>/dev/null; then
    if [ -f /mnt/cidata/meta-data ] || [ -f /mnt/cidata/user-data ]; then
      seed=$dev
      break
    fi
    umount /mnt/cidata
  fi
done
: > /etc/user-data.sh
chmod +x /etc/user-data.sh
[ -n "$seed" ] || { echo "cloud-init: no cidata seed"; exit 0; }
echo "cloud-init: seed on $seed"

value() {  # value KEY FILE: a top-level "key: value" of a simple YAML file
  sed -n "s/^$1:[[:space:]]*//p" "$2" 2>/dev/null | head -n1 | tr -d "\"'\r"
}
name=$(value local-hostname /mnt/cidata/meta-data)
data=/mnt/cidata/user-data
case "$(head -n1 "$data" 2>/dev/null)" in
  '#!'*)
    cp "$data" /etc/user-script
    chmod +x /etc/user-script
    echo "sh /etc/user-script" > /etc/user-data.sh
    ;;
  '#cloud-config'*)
    for key in hostname fqdn; do  # fqdn wins, as in cloud-init
      found=$(value "$key" "$data")
      [ -n "$found" ] && name=$found
    done
    # A list under a top-level key: "- cmd" runs as is, "- [a, b]" joined with spaces.
    commands() {
      awk -v key="$1" '
        /^[^ \t#-]/ { inside = ($0 ~ "^" key ":") ; next }
        inside && /^[ \t]*-/ {
          sub(/^[ \t]*-[ \t]*/, "")
          if ($0 ~ /^\[/) { gsub(/^\[|\][ \t]*$/, ""); gsub(/[ \t]*,[ \t]*/, " "); gsub(/"/, "") }
          print
        }' "$data"
    }
    commands bootcmd > /etc/boot-commands.sh
    sh /etc/boot-commands.sh
    commands runcmd > /etc/user-data.sh
    ;;
esac
if [ -n "$name" ]; then
  hostname "${name%%.*}"
  echo "cloud-init: hostname $(hostname)"
fi
umount /mnt/cidata
