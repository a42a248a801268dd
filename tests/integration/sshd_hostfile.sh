#!/usr/bin/env bash
# --hostfile over real SSH, end to end: an sshd of our own on a loopback port (host and client
# keys made for the test in a temporary directory, removed at the end), scripts/setup-ssh.sh
# against it, then 2-host jobs with the hostfile `localhost` + `127.0.0.1`: one that succeeds,
# --check over the hostfile, one where a host's worker fails (every host stops, the failure
# names the host), and one whose second host is unreachable. Needs root and openssh-server
# (installed when missing, as scripts/build.sh installs packages); otherwise exits 77 (skip)
# with the reason.
# Usage: sshd_hostfile.sh RINGGRAD_RUN
set -uo pipefail
run=$(realpath "$1")
here=$(cd "$(dirname "$0")/../.." && pwd)
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAIL: $*"; [[ -f $tmp/sshd.log ]] && sed 's/^/  sshd| /' "$tmp/sshd.log"; exit 1; }

[[ $(id -u) -eq 0 ]] || skip "needs root to run an sshd (running as $(id -un))"
if [[ ! -x /usr/sbin/sshd ]]; then
  command -v apt-get >/dev/null || skip "openssh-server is missing and there is no apt-get"
  echo "installing openssh-server"
  DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -q openssh-server >/dev/null 2>&1 ||
    skip "openssh-server is missing and apt-get install openssh-server failed"
fi

tmp=$(mktemp -d)
cleanup() {
  [[ -f $tmp/sshd.pid ]] && kill "$(cat "$tmp/sshd.pid")" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

port=$(free_port)
ssh-keygen -q -t ed25519 -N "" -f "$tmp/host_key" || fail "ssh-keygen (host key)"
ssh-keygen -q -t ed25519 -N "" -f "$tmp/client_key" || fail "ssh-keygen (client key)"
cp "$tmp/client_key.pub" "$tmp/authorized_keys"
cat >"$tmp/sshd_config" <<CONF
Port $port
ListenAddress 127.0.0.1
HostKey $tmp/host_key
AuthorizedKeysFile $tmp/authorized_keys
PidFile $tmp/sshd.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
CONF
mkdir -p /run/sshd  # sshd's privilege-separation directory
/usr/sbin/sshd -f "$tmp/sshd_config" -E "$tmp/sshd.log" || fail "sshd did not start"
for _ in $(seq 50); do [[ -f $tmp/sshd.pid ]] && break; sleep 0.1; done

client_opts=(-o UserKnownHostsFile="$tmp/known_hosts" -o StrictHostKeyChecking=no -o LogLevel=ERROR)
# setup-ssh.sh: the test's key is accepted already; a fresh key is generated and, with
# password logins off on this sshd, reported as not set up.
out=$(timeout 60 bash "$here/scripts/setup-ssh.sh" -i "$tmp/client_key" -p "$port" \
      "${client_opts[@]}" localhost 127.0.0.1 2>&1 </dev/null) || fail "setup-ssh.sh: $out"
grep -q "localhost: the key is already accepted" <<<"$out" || fail "setup-ssh.sh said: $out"
grep -q "all 2 hosts accept" <<<"$out" || fail "setup-ssh.sh said: $out"
echo "ok: setup-ssh.sh with an accepted key"
out=$(timeout 60 bash "$here/scripts/setup-ssh.sh" -i "$tmp/new_key" -p "$port" \
      "${client_opts[@]}" 127.0.0.1 2>&1 </dev/null) && fail "an unaccepted key was reported as set up: $out"
grep -q "key: generated $tmp/new_key" <<<"$out" || fail "setup-ssh.sh said: $out"
grep -q "127.0.0.1: ssh-copy-id failed" <<<"$out" || fail "setup-ssh.sh said: $out"
echo "ok: setup-ssh.sh generates a key and reports a host that refuses it"

printf 'localhost slots=2\n127.0.0.1 slots=1  # the same machine under another name\n' >"$tmp/hosts"
ssh_opts="-i $tmp/client_key -o IdentitiesOnly=yes ${client_opts[*]}"
hostfile_job() {  # HOSTFILE ARGS...: ringgrad-run --hostfile over our sshd
  local hosts=$1; shift
  timeout 120 "$run" --hostfile "$hosts" --ssh-port "$port" --ssh-opts "$ssh_opts" \
    --master-port "$(free_port)" --stop-grace 2 "$@" </dev/null
}

# torchrun's worker flags reach every host: an option (--role) and a flag (--virtual-local-rank).
out=$(cd "$tmp" && hostfile_job "$tmp/hosts" --role trainer --virtual-local-rank \
      sh -c 'echo "rank $RANK of $WORLD_SIZE in $PWD as $ROLE_NAME local $LOCAL_RANK"' 2>&1) ||
  fail "the 2-host job failed: $out"
for line in "[localhost:0]: rank 0 of 3 in $tmp as trainer local 0" "[localhost:1]: rank 1 of 3" \
            "[127.0.0.1:2]: rank 2 of 3 in $tmp as trainer local 0"; do
  grep -qF "$line" <<<"$out" || fail "no line '$line' in: $out"
done
grep -qF "[localhost:1]: rank 1 of 3 in $tmp as trainer local 0" <<<"$out" ||
  fail "--virtual-local-rank did not reach the launchers: $out"
echo "ok: 2 hosts, 3 ranks, output prefixed [host:rank], the working directory and torchrun's flags carried over"

out=$(hostfile_job "$tmp/hosts" --check 2>&1) || fail "--check over the hostfile failed: $out"
grep -q "checks passed" <<<"$out" || fail "--check printed no verdict: $out"
grep -q "node 1: every check passed" <<<"$out" || fail "--check: node 1 said nothing: $out"
echo "ok: --check over the hostfile"

start=$SECONDS
out=$(hostfile_job "$tmp/hosts" sh -c '[ "$GROUP_RANK" = 1 ] && exit 3; exec sleep 60' 2>&1) &&
  fail "a job whose host failed succeeded: $out"
((SECONDS - start < 45)) || fail "stopping every host took $((SECONDS - start)) s: $out"
grep -q "host '127.0.0.1' (node 1)" <<<"$out" || fail "the failure does not name the host: $out"
pgrep -f "exec sleep 60" >/dev/null && fail "a worker outlived the job"
echo "ok: one host's worker fails: every host stopped in $((SECONDS - start)) s, the failing host named"

printf 'localhost slots=1\n127.0.0.2 slots=1\n' >"$tmp/unreachable"  # sshd listens on 127.0.0.1 only
out=$(hostfile_job "$tmp/unreachable" true 2>&1) && fail "a job with an unreachable host succeeded"
grep -q "host '127.0.0.2' (node 1): ssh ended with" <<<"$out" || fail "unreachable host not named: $out"
grep -qi "refused" <<<"$out" || fail "ssh's own message is missing: $out"
echo "ok: an unreachable host is one line with ssh's message"
