#!/bin/sh
# Start redis-server with ppomq's users (users.acl beside this script), their passwords
# taken from the environment, so that no password is written into an image, a ConfigMap
# or the repository:
#
#   REDIS_LEARNER_PASSWORD   -> user ppomq-learner   (placeholder >CHANGE-ME-learner)
#   REDIS_READER_PASSWORD    -> user ppomq-reader    (placeholder >CHANGE-ME-reader)
#   REDIS_OPERATOR_PASSWORD  -> user ppomq-operator  (unset: that user is turned off)
#
# i.e. each `>CHANGE-ME-<role>` in users.acl takes $REDIS_<ROLE>_PASSWORD. Passwords go into
# redis:// URLs too, so they must be URL-safe: letters, digits and . _ ~ -
# (`openssl rand -hex 24` makes a good one). The rendered ACL file is written, mode 600,
# under $TMPDIR (default /tmp). Arguments are passed on to redis-server; REDIS_SERVER
# names the binary (default: redis-server on PATH).
#
# Used by docker-compose.yml and k8s/base/redis (a copy there: kustomize reads no file
# outside its tree; tests/deploy/test_manifests.py keeps the copies identical).
set -eu

here=$(dirname "$0")
template="$here/users.acl"
[ -r "$template" ] || { echo "start-redis: cannot read $template" >&2; exit 1; }

umask 077
acl=$(mktemp "${TMPDIR:-/tmp}/ppomq-users.acl.XXXXXX")

# Filled in by the shell itself, not sed: a password in a command's arguments shows in `ps`.
: >"$acl"
while IFS= read -r line || [ -n "$line" ]; do
    case $line in
        *'>CHANGE-ME-'*)
            rest=${line#*>CHANGE-ME-}
            role=${rest%% *}
            before=${line%%>CHANGE-ME-*}
            after=${rest#"$role"}
            var="REDIS_$(echo "$role" | tr 'a-z' 'A-Z')_PASSWORD"
            eval "password=\${$var:-}"
            if [ -z "$password" ]; then
                # No password given: the user is switched off rather than left with a known one.
                line="${before% on } off$after"
                echo "start-redis: $var is not set; user ppomq-$role is off" >&2
            else
                case $password in
                    *[!A-Za-z0-9._~-]*)
                        echo "start-redis: $var may hold only letters, digits and . _ ~ -" >&2
                        exit 1
                        ;;
                esac
                line="$before>$password$after"
            fi
            ;;
    esac
    printf '%s\n' "$line" >>"$acl"
done <"$template"

if grep -q 'CHANGE-ME' "$acl"; then
    echo "start-redis: a CHANGE-ME placeholder in $template was not replaced" >&2
    exit 1
fi

exec "${REDIS_SERVER:-redis-server}" "$@" --aclfile "$acl"
