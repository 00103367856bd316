#!/usr/bin/env bash
# Starts a PgBouncer in transaction mode at 127.0.0.1:6432 in front of the
# local PostgreSQL's `test` database, as managed PostgreSQL services put one
# in front of theirs: the suite behind it (JOBTABLE_PGBOUNCER_URL) checks
# that jobtable with `pooler: 'transaction'` needs nothing such a pooler
# breaks. Idempotent: does nothing when 6432 already answers. Installs
# Debian's pgbouncer package when it is missing. PgBouncer refuses to run
# as root, so as root it switches to the postgres user (-u postgres).
set -euo pipefail

PORT=6432
if pg_isready -h 127.0.0.1 -p "$PORT" -U postgres -d test -q 2>/dev/null; then
  exit 0
fi

if ! command -v pgbouncer >/dev/null 2>&1; then
  echo "ci: pgbouncer is missing; installing Debian's pgbouncer package"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends pgbouncer
fi

DIR="$(mktemp -d /tmp/jobtable-pgbouncer.XXXXXX)"
# Trust auth to PostgreSQL and from clients; a user must still be listed in
# the auth file for PgBouncer to accept it.
printf '"postgres" ""\n' > "$DIR/userlist.txt"
cat > "$DIR/pgbouncer.ini" <<EOF
[databases]
test = host=127.0.0.1 port=5432 dbname=test

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PORT
unix_socket_dir = $DIR
auth_type = trust
auth_file = $DIR/userlist.txt
pool_mode = transaction
; Many test files run at once, each opening drivers with pools of up to 10.
max_client_conn = 2000
default_pool_size = 20
; Some clients send it at startup, and PgBouncer refuses a parameter it does not know.
ignore_startup_parameters = extra_float_digits
logfile = $DIR/pgbouncer.log
pidfile = $DIR/pgbouncer.pid
admin_users = postgres
EOF
chmod 755 "$DIR"
chmod 644 "$DIR"/*

# Room for max_client_conn's sockets (PgBouncer says how many it expects in its log).
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt 4096 ]; then ulimit -n 4096 2>/dev/null || true; fi
if [ "$(id -u)" = 0 ]; then
  chown -R postgres "$DIR"
  pgbouncer -d -u postgres "$DIR/pgbouncer.ini"
else
  pgbouncer -d "$DIR/pgbouncer.ini"
fi

for _ in $(seq 1 30); do
  pg_isready -h 127.0.0.1 -p "$PORT" -U postgres -d test -q 2>/dev/null && break
  sleep 0.2
done
if ! pg_isready -h 127.0.0.1 -p "$PORT" -U postgres -d test -q 2>/dev/null; then
  echo "ci: PgBouncer did not start at 127.0.0.1:$PORT; its log:" >&2
  cat "$DIR/pgbouncer.log" >&2 || true
  exit 1
fi
echo "ci: PgBouncer (transaction mode) at 127.0.0.1:$PORT, config and log in $DIR"
