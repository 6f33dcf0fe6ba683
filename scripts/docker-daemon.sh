#!/usr/bin/env bash
# A private dockerd for pytest-wedge: its own socket, data root and exec root under one
# directory, so it never touches (or is touched by) another daemon on the machine.
#   scripts/docker-daemon.sh up     start it (installs docker.io first if dockerd is missing)
#   scripts/docker-daemon.sh down   remove our containers, stop it, clean up
#   scripts/docker-daemon.sh env    print the export line for a running daemon
#   scripts/docker-daemon.sh run CMD...
#                                   run CMD with DOCKER_HOST set, starting the daemon first and
#                                   stopping it afterwards only if this call started it
#                                   (WEDGE_DOCKER=0: just run CMD, docker tests then skip)
# `up` prints `export DOCKER_HOST=unix://...`; use it as `eval "$(scripts/docker-daemon.sh up)"`.
# Everything but the export line goes to stderr so the eval stays clean.
set -euo pipefail

B="${WEDGE_DOCKER_DIR:-/tmp/pytest-wedge-docker}"
SOCK="$B/docker.sock"
PIDFILE="$B/dockerd.pid"
LABEL="pytest-wedge.session"
START_DEADLINE_S="${WEDGE_DOCKER_START_TIMEOUT:-30}"
STOP_DEADLINE_S=30

log() { echo "docker-daemon: $*" >&2; }

ping() {
    [ -S "$SOCK" ] && curl -fsS --max-time 2 --unix-socket "$SOCK" http://localhost/_ping >/dev/null 2>&1
}

daemon_pid() {
    # A pid is ours only if it is alive *and* is a dockerd started with our pidfile; a stale
    # pidfile whose pid got reused must never make us signal a stranger.
    [ -f "$PIDFILE" ] || return 1
    local pid
    pid="$(cat "$PIDFILE")"
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "--pidfile $PIDFILE" || return 1
    echo "$pid"
}

api() { curl -fsS --max-time 10 --unix-socket "$SOCK" "$@"; }

install_engine() {
    command -v dockerd >/dev/null 2>&1 && return 0
    command -v apt-get >/dev/null 2>&1 || {
        log "dockerd is missing and apt-get is not available; install Docker Engine yourself"
        exit 1
    }
    log "installing docker.io (dockerd is missing)"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
        docker.io docker-compose curl >&2
}

up() {
    if ping; then
        log "already up at $SOCK"
        echo "export DOCKER_HOST=unix://$SOCK"
        return 0
    fi
    install_engine
    command -v curl >/dev/null 2>&1 || { log "curl is required to poll the daemon"; exit 1; }
    mkdir -p "$B/data" "$B/exec"
    # --bridge none deletes docker0 on start; that is fine only because every container here
    # uses host networking and this daemon is the only one that is ours to configure.
    nohup dockerd --host "unix://$SOCK" --pidfile "$PIDFILE" --data-root "$B/data" \
        --exec-root "$B/exec" --bridge none --iptables=false --ip6tables=false \
        --ip-masq=false >"$B/dockerd.log" 2>&1 </dev/null &
    local spawned=$!
    local deadline=$((SECONDS + START_DEADLINE_S))
    until ping; do
        if ! kill -0 "$spawned" 2>/dev/null; then
            log "dockerd exited during start-up; last lines of $B/dockerd.log:"
            tail -n 25 "$B/dockerd.log" >&2
            exit 1
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "dockerd did not answer /_ping on $SOCK within ${START_DEADLINE_S}s; log tail:"
            tail -n 25 "$B/dockerd.log" >&2
            exit 1
        fi
        sleep 0.1
    done
    log "up: pid $spawned, socket $SOCK, log $B/dockerd.log"
    echo "export DOCKER_HOST=unix://$SOCK"
}

our_container_ids() {
    ping || return 0
    # Only containers carrying our session label; anything else on this daemon is left alone.
    api "http://localhost/containers/json?all=1&filters=%7B%22label%22%3A%5B%22$LABEL%22%5D%7D" \
        | { grep -o '"Id":"[0-9a-f]*"' || true; } | cut -d'"' -f4 | tr '\n' ' '
}

remove_our_containers() {
    local ids id
    ids="$(our_container_ids)" || return 0
    for id in $ids; do
        api -X DELETE "http://localhost/containers/$id?force=1" >/dev/null || true
    done
    [ -z "$ids" ] || log "removed $(wc -w <<<"$ids") container(s)"
}

down() {
    if [ ! -d "$B" ]; then
        log "nothing to do ($B does not exist)"
        return 0
    fi
    # Containers first: with one still running, dockerd takes ~12 s to stop instead of ~2 s.
    remove_our_containers
    local pid unclean=0
    if pid="$(daemon_pid)"; then
        kill -TERM "$pid"
        local deadline=$((SECONDS + STOP_DEADLINE_S))
        while kill -0 "$pid" 2>/dev/null; do
            if [ "$SECONDS" -ge "$deadline" ]; then
                log "dockerd (pid $pid) ignored SIGTERM for ${STOP_DEADLINE_S}s; sending SIGKILL"
                kill -KILL "$pid" 2>/dev/null || true
                sleep 0.5
                unclean=1
                break
            fi
            sleep 0.1
        done
        log "stopped dockerd (pid $pid)"
    fi
    # dockerd leaves its default netns bind-mounted; rm -rf would fail on it (EBUSY).
    if mountpoint -q "$B/exec/netns/default" 2>/dev/null; then
        umount "$B/exec/netns/default" || umount -l "$B/exec/netns/default" || true
    fi
    # Never remove a tree that still has a mount inside it (it could be someone's data).
    if grep -q " $B/" /proc/self/mounts; then
        log "mounts remain under $B; leaving it in place:"
        grep " $B/" /proc/self/mounts >&2
        exit 1
    fi
    rm -rf "$B"
    [ "$unclean" = 0 ] || { log "dockerd did not stop cleanly"; return 1; }
    log "removed $B"
}

run() {
    if [ "${WEDGE_DOCKER:-1}" = 0 ]; then
        "$@"
        return
    fi
    local line started=0
    if ! line="$(env_line 2>/dev/null)"; then
        line="$(up)"
        started=1
    fi
    eval "$line"
    export DOCKER_HOST
    # EXIT also covers Ctrl-C and a failing CMD, so a started daemon never outlives the run.
    [ "$started" = 0 ] || trap 'status=$?; down || status=1; exit $status' EXIT
    local rc=0
    "$@" || rc=$?
    # The suite must clean up after itself: a labelled container left now is a leak to fix.
    local left
    left="$(our_container_ids)"
    if [ -n "$left" ]; then
        log "LEAK: $(wc -w <<<"$left") container(s) labelled $LABEL outlived the run: $left"
        rc=1
    fi
    return "$rc"
}

env_line() {
    ping && echo "export DOCKER_HOST=unix://$SOCK" || { log "not running at $SOCK"; return 1; }
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    env) env_line ;;
    run) shift; [ "$#" -gt 0 ] || { echo "usage: $0 run CMD..." >&2; exit 2; }; run "$@" ;;
    *) echo "usage: $0 up|down|env|run CMD..." >&2; exit 2 ;;
esac
