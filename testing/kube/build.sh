# Sourced by testing/kube/start and testing/kube/kubectl (bash).
#
#   build_when_stale BIN CMD SCRIPT WHAT
#
# builds ./cmd/CMD of this module into BIN when BIN is missing, older than
# cmd/CMD/**/*.go, go.mod, go.sum, SCRIPT (the caller) or this file, or was
# built from another go.mod (BIN.stamp records it: the version flags depend on
# it). Go's build cache makes a rebuild a link. Concurrent callers (parallel
# test suites) build once: the rest wait (flock on BIN.lock). WHAT names the
# binary in the "SCRIPT: building" line on stderr.
build_when_stale() {
  local bin=$1 cmd=$2 script=$3 what=$4
  local here
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  mkdir -p "$(dirname "$bin")"
  if command -v flock >/dev/null; then
    exec 9>"$bin.lock"
    flock 9
    _build_if_stale "$here" "$bin" "$cmd" "$script" "$what"
    flock -u 9
    exec 9>&-
  else
    _build_if_stale "$here" "$bin" "$cmd" "$script" "$what"
  fi
}

_build_if_stale() {
  local here=$1 bin=$2 cmd=$3 script=$4 what=$5
  local stale=0 f
  if [ ! -x "$bin" ]; then
    stale=1
  elif [ -n "$(find "$here/cmd/$cmd" -name '*.go' -newer "$bin" -print -quit)" ]; then
    stale=1
  else
    for f in go.mod go.sum "$script" build.sh; do
      if [ "$here/$f" -nt "$bin" ]; then stale=1; fi
    done
  fi
  [ "$stale" = 1 ] || cmp -s "$here/go.mod" "$bin.stamp" || stale=1
  [ "$stale" = 1 ] || return 0
  command -v go >/dev/null || { echo "$script: go not found (expected /usr/local/go/bin/go)" >&2; return 1; }
  # The release both kube-apiserver and kubectl report (/version, discovery,
  # `kubectl version`): go.mod pins the staging modules (k8s.io/kubectl
  # included) to the ones of this k8s.io/kubernetes release. A plain
  # `go build` would report v0.0.0-master. The build date is fixed so that an
  # unchanged tree relinks to the same binary.
  # -s -w: no symbol table or DWARF; the link is faster and needs less
  # memory, and Go stack traces (panics, SIGQUIT dumps) are unaffected.
  local version pkg=k8s.io/component-base/version
  version="$(cd "$here" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
  local major="${version#v}"; major="${major%%.*}"
  local minor="${version#v*.}"; minor="${minor%%.*}"
  local ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  echo "$script: building $bin ($what $version)" >&2
  local tmp="$bin.tmp.$$"
  if ! (cd "$here" && nice -n 10 go build -ldflags "$ldflags" -o "$tmp" "./cmd/$cmd"); then
    rm -f "$tmp"
    return 1
  fi
  mv -f "$tmp" "$bin"
  cp "$here/go.mod" "$bin.stamp"
}
