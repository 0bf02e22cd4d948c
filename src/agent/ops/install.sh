#!/bin/sh
# orc bootstrap. Every orc node serves this script at https://NODE:7418/install.sh together with its
# own package, so a new machine installs exactly the version the cluster runs:
#
#   curl -fsS --pinnedpubkey 'sha256//…' -k https://NODE:7418/install.sh | ORC_TOKEN='T' sh -s --
#
# (`orc token create --print-install` prints that line.) The node's certificate is self-signed:
# curl checks its public key against the pin instead of a CA. This script fetches everything else
# pinned the same way and checks the package and the Node.js binary against the sha256 below,
# refusing a mismatch. The token comes from ORC_TOKEN or --token-file, never from the arguments
# (every user of the machine can read those), and reaches `orc join` the same way.
# It checks everything first (Linux, a known package manager, root, the token) and changes nothing
# when a check fails; not root, it runs again with sudo (or doas) when the machine has it; then it installs what is missing with the distribution's package manager,
# installs orc under PREFIX, writes a systemd unit, joins the cluster and starts the agent.
# Running it again is safe: an existing member is upgraded in place and never joins twice.
# The script holds nothing secret; the token is what you pass. `--help` lists the options.
set -eu

# Filled in by the node that served this script.
ORC_SERVER='@@SERVER@@'
ORC_PIN='@@PIN@@'
ORC_VERSION='@@VERSION@@'
ORC_PEER='@@PEER@@'
ORC_SHA256='@@SHA256@@'
ORC_NODE_ARCH='@@NODE_ARCH@@'
ORC_NODE_VERSION='@@NODE_VERSION@@'
ORC_NODE_SHA256='@@NODE_SHA256@@'
NODE_MIN='20.10.0'

# For tests only: a directory standing in for / when reading /etc/os-release and /sys/module.
SYSROOT="${ORC_INSTALL_SYSROOT:-}"

TOKEN=${ORC_TOKEN:-}
TOKEN_FILE=''
PREFIX='/usr/local'
DATA_DIR='/var/lib/orc'
SYSTEMD_DIR='/etc/systemd/system'
NAME=''
LISTEN=''
HTTP_LISTEN=''
START=1
SYSTEMD=1
PACKAGES=1
DRY_RUN=0
UNINSTALL=0
SUDO_OK=1

# The arguments as given, quoted for `eval set --`: the script runs again with them under sudo.
ARGS=''
for a in "$@"; do ARGS="$ARGS '$(printf '%s' "$a" | sed "s/'/'\\\\''/g")'"; done

say() { printf 'orc-install: %s\n' "$*" >&2; }
die() {
  printf 'orc-install: error: %s\n' "$*" >&2
  exit 1
}

usage() {
  cat <<EOF
Install orc $ORC_VERSION from $ORC_SERVER and join this machine to its cluster.

Usage: curl -fsS --pinnedpubkey PIN -k $ORC_SERVER/install.sh | ORC_TOKEN=T sh -s -- [options]

  ORC_TOKEN=T          join token (orc token create on a member); not needed to upgrade a member
  --token-file FILE    read the join token from FILE instead
  --name N             node name (default: the host name)
  --listen ADDR        mesh listen address, ip:port (default 0.0.0.0:7419 and [::]:7419); may repeat
  --http-listen ADDR   install/metrics listener of the new node: mesh, ip:port or off
                       (default mesh: port 7418 on its mesh addresses; 0.0.0.0:7418 for all)
  --data-dir DIR       state of the node (default /var/lib/orc)
  --prefix DIR         install orc under DIR/lib/orc and DIR/bin/orc (default /usr/local)
  --systemd-dir DIR    where orc.service goes (default /etc/systemd/system)
  --no-systemd         do not write a systemd unit
  --no-start           install and join, but do not start the agent (start it with: orc up)
  --skip-packages      do not install distribution packages (report what is missing)
  --dry-run            print what would be done and change nothing
  --no-sudo            not root: fail instead of running again with sudo (or doas)
  --uninstall          stop and remove orc (the data dir is kept)
  -h, --help           this help
EOF
}

need_value() {
  [ "$2" -ge 2 ] || die "$1 needs a value (see --help)"
}

while [ $# -gt 0 ]; do
  case "$1" in
    --token | --token=*) die "a join token in the arguments is visible to every user of this machine (ps): give it in ORC_TOKEN or with --token-file FILE" ;;
    --token-file) need_value "$1" $#; TOKEN_FILE=$2; shift 2 ;;
    --token-file=*) TOKEN_FILE=${1#*=}; shift ;;
    --name) need_value "$1" $#; NAME=$2; shift 2 ;;
    --name=*) NAME=${1#*=}; shift ;;
    --listen) need_value "$1" $#; LISTEN="$LISTEN $2"; shift 2 ;;
    --listen=*) LISTEN="$LISTEN ${1#*=}"; shift ;;
    --http-listen) need_value "$1" $#; HTTP_LISTEN=$2; shift 2 ;;
    --http-listen=*) HTTP_LISTEN=${1#*=}; shift ;;
    --data-dir) need_value "$1" $#; DATA_DIR=$2; shift 2 ;;
    --data-dir=*) DATA_DIR=${1#*=}; shift ;;
    --prefix) need_value "$1" $#; PREFIX=$2; shift 2 ;;
    --prefix=*) PREFIX=${1#*=}; shift ;;
    --systemd-dir) need_value "$1" $#; SYSTEMD_DIR=$2; shift 2 ;;
    --systemd-dir=*) SYSTEMD_DIR=${1#*=}; shift ;;
    --no-systemd) SYSTEMD=0; shift ;;
    --no-start) START=0; shift ;;
    --skip-packages) PACKAGES=0; shift ;;
    --dry-run) DRY_RUN=1; shift ;;
    --no-sudo) SUDO_OK=0; shift ;;
    --uninstall) UNINSTALL=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done

case "$PREFIX$DATA_DIR$SYSTEMD_DIR$NAME$LISTEN$HTTP_LISTEN" in
  *"'"* | *'"'* | *\\* | *'$'* | *'`'*) die "options may not contain quotes, backslashes, \$ or backticks" ;;
esac
case "$PREFIX" in /*) ;; *) die "--prefix must be an absolute path" ;; esac
if [ -n "$TOKEN_FILE" ]; then
  [ -r "$TOKEN_FILE" ] || die "--token-file $TOKEN_FILE: cannot read it"
  TOKEN=$(tr -d ' \t\r\n' <"$TOKEN_FILE")
fi
# Not passed on to anything this script starts, but `orc join` (which is given it explicitly).
unset ORC_TOKEN
case "$DATA_DIR" in /*) ;; *) die "--data-dir must be an absolute path" ;; esac

LIB="$PREFIX/lib/orc"
BIN="$PREFIX/bin/orc"
UNIT="$SYSTEMD_DIR/orc.service"

# ---- checks (nothing is changed until all of them pass) -------------------------------------------

[ "$(uname -s)" = Linux ] || die "unsupported OS: $(uname -s); orc runs on Linux (Debian, Ubuntu, Fedora, RHEL and its rebuilds, Arch)"

os_field() {
  sed -n "s/^$1=//p" "$SYSROOT/etc/os-release" 2>/dev/null | head -n 1 | tr -d '"'"'"
}
[ -r "$SYSROOT/etc/os-release" ] || die "unsupported OS: no /etc/os-release; orc supports Debian, Ubuntu, Fedora, RHEL and its rebuilds, Arch"
OS_ID=$(os_field ID)
OS_LIKE=$(os_field ID_LIKE)
OS_NAME=$(os_field PRETTY_NAME)
PM=''
for id in $OS_ID $OS_LIKE; do
  case "$id" in
    debian | ubuntu | raspbian) PM=apt; break ;;
    fedora | rhel | centos | rocky | almalinux) PM=dnf; break ;;
    arch | archarm) PM=pacman; break ;;
  esac
done
[ -n "$PM" ] || die "unsupported OS: ${OS_NAME:-$OS_ID} (orc supports Debian, Ubuntu, Fedora, RHEL and its rebuilds, Arch)"
if [ "$PM" = dnf ] && ! command -v dnf >/dev/null 2>&1 && command -v yum >/dev/null 2>&1; then PM=yum; fi

ARCH=$(uname -m)
case "$ARCH" in
  x86_64 | aarch64 | armv7l) ;;
  *) die "unsupported CPU architecture $ARCH (orc supports x86_64, aarch64, armv7l)" ;;
esac

command -v curl >/dev/null 2>&1 || die "need curl to download from $ORC_SERVER"
case "$ORC_PIN" in sha256//?*) ;; *) die "this script carries no certificate pin of $ORC_SERVER: fetch it again from the node (orc token create --print-install)" ;; esac

# Everything comes from the node that served this script, over TLS pinned to its certificate's key
# (self-signed, hence -k: the pin is the check). curl refuses any other server.
fetch() { # URL FILE
  curl -fsS --retry 3 --pinnedpubkey "$ORC_PIN" -k -o "$2" "$1"
}

fetch_text() { # URL
  curl -fsS --pinnedpubkey "$ORC_PIN" -k "$1"
}

# Not root: run again as root with sudo or doas. The script came through a pipe, so it is fetched
# again from the node that served it (into a file, so that a failed download is not an empty run).
if [ "$DRY_RUN" = 0 ] && [ "$(id -u)" != 0 ]; then
  SUDO=''
  if [ "$SUDO_OK" = 1 ]; then
    for s in sudo doas; do
      if command -v "$s" >/dev/null 2>&1; then
        SUDO=$s
        break
      fi
    done
  fi
  [ "$SUDO_OK" = 1 ] || die "must run as root (--no-sudo)"
  [ -n "$SUDO" ] || die "must run as root, and there is no sudo or doas here to become root: run it again as root"
  self=$(mktemp)
  fetch "$ORC_SERVER/install.sh" "$self" || die "cannot fetch $ORC_SERVER/install.sh again to run it with $SUDO"
  say "not root: running again with $SUDO"
  eval "set -- $ARGS"
  # sudo does not pass ORC_TOKEN on: the token goes in a file only this user (and root) can read.
  tokfile=''
  if [ -n "$TOKEN" ] && [ -z "$TOKEN_FILE" ]; then
    tokfile=$(mktemp)
    printf '%s\n' "$TOKEN" >"$tokfile"
    set -- --token-file "$tokfile" "$@"
  fi
  rc=0
  "$SUDO" sh "$self" --no-sudo "$@" || rc=$?
  rm -f "$self" ${tokfile:+"$tokfile"}
  exit "$rc"
fi

sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$1" | cut -d' ' -f1
  else
    openssl dgst -sha256 -r "$1" | cut -d' ' -f1
  fi
}

b64url_decode() {
  b=$(printf '%s' "$1" | tr -- '-_' '+/')
  case $((${#b} % 4)) in
    0) ;;
    2) b="$b==" ;;
    3) b="$b=" ;;
    *) return 1 ;;
  esac
  printf '%s' "$b" | base64 -d 2>/dev/null
}

json_string() { # FIELD JSON
  printf '%s' "$2" | sed -n "s/.*\"$1\":\"\\([^\"]*\\)\".*/\\1/p"
}

MEMBER=0
[ -f "$DATA_DIR/cluster.json" ] && MEMBER=1

if [ "$UNINSTALL" = 0 ]; then
  if [ "$MEMBER" = 1 ]; then
    say "$DATA_DIR already belongs to a cluster: upgrading orc, not joining again"
  else
    [ -n "$TOKEN" ] || [ "$DRY_RUN" = 1 ] || die "a join token is required in ORC_TOKEN or --token-file (create one on a member: orc token create --print-install)"
  fi
  if [ "$MEMBER" = 0 ] && [ -n "$TOKEN" ]; then
    [ -n "$ORC_PEER" ] || die "$ORC_SERVER does not run the mesh: nothing to join"
    payload=${TOKEN#orcjoin1.}
    [ "$payload" != "$TOKEN" ] || die "bad token: not an orc join token (expected orcjoin1.…)"
    claims=$(b64url_decode "$payload") || die "bad token: it is damaged (not base64url); copy it again"
    TOKEN_ID=$(json_string id "$claims")
    secret=$(json_string secret "$claims")
    { [ -n "$TOKEN_ID" ] && [ -n "$secret" ]; } || die "bad token: it is damaged (fields missing); copy it again"
    hashfile=$(mktemp)
    printf '%s' "$secret" >"$hashfile"
    hash=$(sha256_of "$hashfile")
    rm -f "$hashfile"
    verdict=$(fetch_text "$ORC_SERVER/install/token?id=$TOKEN_ID&hash=$hash") || die "cannot reach $ORC_SERVER to check the token"
    case "$verdict" in
      ok*) ;;
      *) die "bad token: ${verdict#refused: }" ;;
    esac
  fi
fi

# ---- plan ---------------------------------------------------------------------------------------

pkg_name() { # TOOL -> package name for $PM ("" = not packaged)
  case "$1:$PM" in
    wg:*) echo wireguard-tools ;;
    wireguard-go:apt | wireguard-go:pacman) echo wireguard-go ;;
    wireguard-go:*) echo '' ;;
    bwrap:*) echo bubblewrap ;;
    runc:*) echo runc ;;
    nft:*) echo nftables ;;
    ip:apt | ip:pacman) echo iproute2 ;;
    ip:*) echo iproute ;;
    node:*) echo nodejs ;;
  esac
}

has() { command -v "$1" >/dev/null 2>&1; }

MISSING=''
UNPACKAGED=''
need_tool() {
  if ! has "$1"; then
    p=$(pkg_name "$1")
    if [ -n "$p" ]; then MISSING="$MISSING $p"; else UNPACKAGED="$UNPACKAGED $1"; fi
  fi
}

if [ -d "$SYSROOT/sys/module/wireguard" ] || { [ -z "$SYSROOT" ] && has modprobe && modprobe -nq wireguard 2>/dev/null; }; then
  WG_MODE=kernel
else
  WG_MODE=wireguard-go
fi

version_ge() { # A B: A >= B (dotted numbers)
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -t. -k1,1n -k2,2n -k3,3n | head -n 1)" = "$2" ]
}

NODE_BIN=''
NODE_SOURCE=''
if [ -x "$LIB/node/bin/node" ]; then
  NODE_BIN="$LIB/node/bin/node"
  NODE_SOURCE="kept ($NODE_BIN)"
elif has node && version_ge "$(node -p process.versions.node 2>/dev/null || echo 0)" "$NODE_MIN"; then
  NODE_BIN=$(command -v node)
  NODE_SOURCE="system ($NODE_BIN, $(node -p process.versions.node))"
elif [ "$ARCH" = "$ORC_NODE_ARCH" ]; then
  NODE_BIN="$LIB/node/bin/node"
  NODE_SOURCE="from $ORC_SERVER (Node.js $ORC_NODE_VERSION, the runtime the serving node uses)"
else
  MISSING="$MISSING nodejs"
  NODE_SOURCE="distribution package nodejs (must be >= $NODE_MIN)"
fi

if [ "$UNINSTALL" = 0 ]; then
  need_tool wg
  [ "$WG_MODE" = kernel ] || need_tool wireguard-go
  need_tool bwrap
  need_tool runc
  need_tool nft
  need_tool ip
fi

HAVE_SYSTEMD=0
if [ "$SYSTEMD" = 1 ] && has systemctl && [ -d /run/systemd/system ]; then HAVE_SYSTEMD=1; fi

if [ "$DRY_RUN" = 1 ]; then
  echo "os: ${OS_NAME:-$OS_ID} ($ARCH)"
  echo "package-manager: $PM"
  echo "wireguard: $WG_MODE"
  echo "missing-packages:${MISSING:- none}"
  [ -z "$UNPACKAGED" ] || echo "not-packaged:$UNPACKAGED"
  echo "node: $NODE_SOURCE"
  if [ "$UNINSTALL" = 1 ]; then
    echo "remove: $BIN $LIB $UNIT"
  else
    echo "install: orc $ORC_VERSION into $LIB/$ORC_VERSION, command $BIN"
    [ "$SYSTEMD" = 0 ] || echo "unit: $UNIT"
    if [ "$MEMBER" = 1 ]; then echo "join: no (already a member)"; else echo "join: $ORC_PEER as ${NAME:-$(hostname)}"; fi
  fi
  exit 0
fi

# ---- uninstall ----------------------------------------------------------------------------------

if [ "$UNINSTALL" = 1 ]; then
  if [ "$HAVE_SYSTEMD" = 1 ] && [ -f "$UNIT" ]; then
    systemctl disable --now orc.service >/dev/null 2>&1 || true
  fi
  rm -f "$UNIT" "$BIN"
  rm -rf "$LIB"
  [ "$HAVE_SYSTEMD" = 0 ] || systemctl daemon-reload || true
  say "removed orc; the data dir $DATA_DIR is kept (remove it with: rm -rf $DATA_DIR)"
  exit 0
fi

# ---- install ------------------------------------------------------------------------------------

install_packages() {
  say "installing$1 with $PM"
  # $1 is a list of package names: split on purpose.
  # shellcheck disable=SC2086
  case "$PM" in
    apt)
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq >/dev/null || true
      apt-get install -y -qq --no-install-recommends $1 >/dev/null
      ;;
    dnf) dnf install -y -q $1 ;;
    yum) yum install -y -q $1 ;;
    pacman) pacman -Sy --noconfirm --needed $1 ;;
  esac
}

if [ -n "$MISSING" ]; then
  if [ "$PACKAGES" = 1 ]; then
    install_packages "$MISSING" || die "installing$MISSING with $PM failed (install them by hand and run this again)"
  else
    say "missing packages (not installed, --skip-packages):$MISSING"
  fi
fi
[ -z "$UNPACKAGED" ] || say "warning:$UNPACKAGED not packaged for $OS_ID; install it by hand (orc needs it for WireGuard without the kernel module)"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM

mkdir -p "$LIB" "$PREFIX/bin"
if [ -z "$NODE_BIN" ] || [ ! -x "$NODE_BIN" ]; then
  if [ "$NODE_BIN" = "$LIB/node/bin/node" ]; then
    say "downloading Node.js $ORC_NODE_VERSION from $ORC_SERVER"
    fetch "$ORC_SERVER/install/node" "$TMP/node"
    got=$(sha256_of "$TMP/node")
    [ "$got" = "$ORC_NODE_SHA256" ] || die "the Node.js binary from $ORC_SERVER does not match the sha256 this script carries (got $got, expected $ORC_NODE_SHA256): refusing it"
    chmod 0755 "$TMP/node"
    "$TMP/node" -e 0 || die "the Node.js binary of $ORC_SERVER does not run here (install Node.js >= $NODE_MIN and run this again)"
    mkdir -p "$LIB/node/bin"
    mv -f "$TMP/node" "$LIB/node/bin/node"
  else
    NODE_BIN=$(command -v node || true)
    { [ -n "$NODE_BIN" ] && version_ge "$(node -p process.versions.node)" "$NODE_MIN"; } ||
      die "Node.js >= $NODE_MIN is needed and $PM offers none; install it (https://nodejs.org) and run this again"
  fi
fi

DEST="$LIB/$ORC_VERSION"
if [ -f "$DEST/.orc-package" ] && [ "$(cat "$DEST/.orc-package")" = "$ORC_SHA256" ]; then
  say "orc $ORC_VERSION is already installed in $DEST"
else
  say "downloading orc $ORC_VERSION from $ORC_SERVER"
  fetch "$ORC_SERVER/install/orc-$ORC_VERSION.tar.gz" "$TMP/orc.tar.gz"
  got=$(sha256_of "$TMP/orc.tar.gz")
  [ "$got" = "$ORC_SHA256" ] || die "the package from $ORC_SERVER does not match the sha256 this script carries (got $got, expected $ORC_SHA256): refusing it"
  rm -rf "$DEST.new"
  mkdir -p "$DEST.new"
  tar -xzf "$TMP/orc.tar.gz" -C "$DEST.new"
  printf '%s\n' "$ORC_SHA256" >"$DEST.new/.orc-package"
  rm -rf "$DEST"
  mv "$DEST.new" "$DEST"
fi
ln -sfn "$ORC_VERSION" "$LIB/current.new"
mv -T "$LIB/current.new" "$LIB/current" 2>/dev/null || { rm -f "$LIB/current"; mv "$LIB/current.new" "$LIB/current"; }

cat >"$BIN.new" <<EOF
#!/bin/sh
# orc, installed by $ORC_SERVER/install.sh
export MALLOC_ARENA_MAX=2
exec "$NODE_BIN" --max-semi-space-size=2 "$LIB/current/orc.mjs" "\$@"
EOF
chmod 0755 "$BIN.new"
mv -f "$BIN.new" "$BIN"
"$BIN" version --client >/dev/null || die "the installed $BIN does not run"

AGENT_FLAGS="--data-dir $DATA_DIR"
[ -z "$NAME" ] || AGENT_FLAGS="$AGENT_FLAGS --name $NAME"
for a in $LISTEN; do AGENT_FLAGS="$AGENT_FLAGS --listen $a"; done
[ -z "$HTTP_LISTEN" ] || AGENT_FLAGS="$AGENT_FLAGS --http-listen $HTTP_LISTEN"
# An upgrade without flags keeps the flags the unit already has (the node's name above all).
if [ "$MEMBER" = 1 ] && [ -z "$NAME$LISTEN$HTTP_LISTEN" ] && [ -f "$UNIT" ]; then
  prev=$(sed -n 's/^ExecStart=[^ ]* up //p' "$UNIT" | head -n 1)
  case "$prev" in "--data-dir $DATA_DIR"*) AGENT_FLAGS=$prev ;; esac
fi

if [ "$SYSTEMD" = 1 ]; then
  mkdir -p "$SYSTEMD_DIR"
  protect_home='ProtectHome=yes'
  private_tmp='PrivateTmp=yes'
  case "$DATA_DIR" in
    /home/* | /root/*) protect_home='' ;;
    /tmp/* | /var/tmp/*) private_tmp='' ;;
  esac
  cat >"$UNIT.new" <<EOF
# Installed by $ORC_SERVER/install.sh (orc $ORC_VERSION). Re-running the script rewrites it.
[Unit]
Description=orc cluster agent
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
ExecStart=$BIN up $AGENT_FLAGS
Restart=on-failure
RestartSec=2s
TimeoutStopSec=60s
LimitNOFILE=65536
Environment=ORC_DATA_DIR=$DATA_DIR
# The agent stays root: it builds WireGuard links, routes, nftables rules, network namespaces and
# cgroups for pods. What it never needs is taken away.
NoNewPrivileges=yes
ProtectSystem=full
$protect_home
$private_tmp
ProtectClock=yes
ProtectHostname=yes
ProtectKernelLogs=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes

[Install]
WantedBy=multi-user.target
EOF
  mv -f "$UNIT.new" "$UNIT"
  [ "$HAVE_SYSTEMD" = 0 ] || systemctl daemon-reload
fi

# ---- join ---------------------------------------------------------------------------------------

if [ "$MEMBER" = 0 ]; then
  say "joining the cluster through $ORC_PEER"
  JOIN_FLAGS="--data-dir $DATA_DIR"
  [ -z "$NAME" ] || JOIN_FLAGS="$JOIN_FLAGS --name $NAME"
  for a in $LISTEN; do JOIN_FLAGS="$JOIN_FLAGS --listen $a"; done
  JOIN_FLAGS="$JOIN_FLAGS --http-listen off"
  log="$TMP/join.log"
  # orc join runs the agent once the node is admitted and synced; stop it there, the unit (or
  # `orc up`) runs it from now on. Word splitting of the flags is intended (no spaces in them).
  # The token in the environment of orc join, which reads and forgets it: never in an argument.
  # shellcheck disable=SC2086
  ORC_TOKEN="$TOKEN" "$BIN" join "$ORC_PEER" $JOIN_FLAGS >"$log" 2>&1 &
  pid=$!
  joined=0
  i=0
  while [ $i -lt 1200 ]; do
    if grep -q 'joined cluster' "$log" 2>/dev/null; then
      joined=1
      break
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1 2>/dev/null || sleep 1
    i=$((i + 1))
  done
  sed -n '/^connecting\|^presenting\|^admitted\|^syncing\|^ready/p' "$log" | sed 's/^/  /' >&2
  if [ "$joined" = 1 ]; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  else
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    grep '^error' "$log" >&2 || tail -n 5 "$log" >&2
    die "join failed; orc is installed ($BIN), retry with a new token"
  fi
fi

if [ "$START" = 1 ] && [ "$HAVE_SYSTEMD" = 1 ] && [ "$SYSTEMD" = 1 ]; then
  systemctl enable orc.service >/dev/null 2>&1
  systemctl restart orc.service
  say "orc $ORC_VERSION is running (systemctl status orc; orc status)"
elif [ "$START" = 1 ]; then
  say "no systemd here: start the agent with: $BIN up $AGENT_FLAGS"
elif [ "$MEMBER" = 1 ]; then
  say "orc $ORC_VERSION installed; (re)start the agent to run it: $BIN up $AGENT_FLAGS"
else
  say "installed and joined; start the agent with: $BIN up $AGENT_FLAGS"
fi
