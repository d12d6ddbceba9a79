#!/usr/bin/env bash
#
# go-interop.sh OUT_DIR -- builds the Go client of the universe service
# (tests/go-interop: the reference's own .proto files, the reference's own
# mssmt package) into OUT_DIR and prints the binary's path on stdout.
# crates/server/tests/grpc/go_client.rs calls it; so can anyone:
#   bin=$(scripts/go-interop.sh /tmp/gi) && $bin gen > truth.json
#
# What it needs, it installs: protoc (Debian's protobuf-compiler, when
# missing and we are root) and protoc-gen-go / protoc-gen-go-grpc (pinned,
# from the Go module proxy, into OUT_DIR/bin). The reference is
# ../shared/reference/taproot-assets beside the checkout, or
# MSSMT_REFERENCE_DIR.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:?usage: go-interop.sh OUT_DIR}"
REF="${MSSMT_REFERENCE_DIR:-$ROOT/../shared/reference/taproot-assets}"
PROTOC_GEN_GO=v1.36.10
PROTOC_GEN_GO_GRPC=v1.5.1

die() { echo "go-interop.sh: $*" >&2; exit 1; }
[[ -f "$REF/mssmt/tree.go" || -d "$REF/mssmt" ]] || die "no reference at $REF (set MSSMT_REFERENCE_DIR)"
REF="$(cd "$REF" && pwd)"
command -v go >/dev/null || die "go is not installed"

if ! command -v protoc >/dev/null; then
    if [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null; then
        echo "go-interop.sh: installing protobuf-compiler" >&2
        apt-get install -y -q --no-install-recommends protobuf-compiler </dev/null >&2 ||
            { apt-get update -q </dev/null >&2 &&
              apt-get install -y -q --no-install-recommends protobuf-compiler </dev/null >&2; } ||
            die "apt-get install protobuf-compiler failed"
    else
        die "protoc is missing: install Debian's protobuf-compiler"
    fi
fi

mkdir -p "$OUT/bin" "$OUT/src"
OUT="$(cd "$OUT" && pwd)"
export GOBIN="$OUT/bin" GOFLAGS=-mod=mod GOTOOLCHAIN=local
[[ -x "$GOBIN/protoc-gen-go" ]] ||
    go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO" >&2
[[ -x "$GOBIN/protoc-gen-go-grpc" ]] ||
    go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC" >&2

# The sources, the code generated from the reference's .proto files, and
# the reference module at its absolute path.
SRC="$OUT/src"
rm -rf "$SRC/gen"
cp "$ROOT"/tests/go-interop/{go.mod,go.sum,main.go} "$SRC/"
P="$REF/taprpc"
M="Mtapcommon.proto=mssmt.test/go-interop/gen/taprpc"
M="$M,Mtaprootassets.proto=mssmt.test/go-interop/gen/taprpc"
M="$M,Muniverse.proto=mssmt.test/go-interop/gen/universerpc"
mkdir -p "$SRC/gen"
PATH="$GOBIN:$PATH" protoc -I "$P" -I "$P/universerpc" \
    --go_out="$SRC/gen" --go_opt=module=mssmt.test/go-interop/gen,$M \
    --go-grpc_out="$SRC/gen" --go-grpc_opt=module=mssmt.test/go-interop/gen,$M \
    tapcommon.proto taprootassets.proto universe.proto
(
    cd "$SRC"
    go mod edit -replace "github.com/lightninglabs/taproot-assets=$REF"
    go build -o "$OUT/go-interop" . >&2
)
echo "$OUT/go-interop"
