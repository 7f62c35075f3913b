#!/bin/sh
# The official image's entrypoint behaviour: options alone mean redis-server; as root, own /data and drop to
# the redis user; without a configuration file, protected mode is off (the container's network is the guard).
set -e
if [ "${1#-}" != "$1" ] || [ "${1%.conf}" != "$1" ]; then
  set -- redis-server "$@"
fi
if [ "$1" = "redis-server" ] && [ "$(id -u)" = "0" ]; then
  find . \! -user redis -exec chown redis '{}' +
  exec setpriv --reuid=redis --regid=redis --init-groups "$0" "$@"
fi
if [ "$1" = "redis-server" ] && [ "${2%.conf}" = "${2:-}" ]; then
  shift
  set -- redis-server --protected-mode no "$@"
fi
exec "$@"
