# Shared by the scripts that compile the project's C++ with Debian's clang outside Bazel (whose
# toolchain is gcc): tools/fuzz and tools/check_thread_safety. Source it from the repository root.
#   clang_sources LABEL          the project's .cc files LABEL depends on, as paths (Bazel query)
#   clang_gen_protos DIR LABEL   C++ of the .proto files LABEL depends on, in DIR, each generated
#                                relative to its Bazel package (as bazel/proto.bzl does), rewritten
#                                only where changed, so that make's timestamps stay meaningful
#   clang_makefile MK OBJDIR CXX FLAGS SRCS [BINARY LINKFLAGS]
#                                a makefile that compiles SRCS incrementally (-MMD); with BINARY it
#                                links them, without it each source is only checked
#                                (-fsyntax-only) and leaves a stamp

# pkg-config names of the system libraries the project's C++ includes.
CLANG_PKGS="absl_status absl_statusor absl_strings absl_str_format absl_time absl_synchronization
  absl_flat_hash_map absl_flat_hash_set absl_random_random absl_base simdjson yaml-cpp spdlog
  libcurl grpc++ protobuf libzstd"
# The instruction sets simdjson's build here assumes (as Bazel's copts do).
CLANG_ARCH_FLAGS="-mavx2 -mbmi -mbmi2 -mpclmul -mlzcnt"

clang_sources() {
  bazel query --noshow_progress "kind(\"source file\", deps($1))" 2>/dev/null |
    grep '^//' | sed -e 's#^//:##' -e 's#^//\([^:]*\):#\1/#'
}

clang_gen_protos() {
  local gen="$1" labels pkg
  # //PKG:PATH of every .proto file: protoc runs in PKG, which is what imports are relative to.
  labels="$(bazel query --noshow_progress "kind(\"source file\", deps($2))" 2>/dev/null |
            grep '^//.*\.proto$' | sed 's#^//##')"
  rm -rf "$gen.new" && mkdir -p "$gen" "$gen.new"
  for pkg in $(cut -d: -f1 <<<"$labels" | sort -u); do
    # shellcheck disable=SC2046
    (cd "./$pkg" && protoc --proto_path=. --cpp_out="$OLDPWD/$gen.new" --grpc_out="$OLDPWD/$gen.new" \
       --plugin=protoc-gen-grpc="$(command -v grpc_cpp_plugin)" $(grep "^$pkg:" <<<"$labels" | cut -d: -f2))
  done
  (cd "$gen.new" && find . -type f) | while read -r f; do
    cmp -s "$gen.new/$f" "$gen/$f" || { mkdir -p "$(dirname "$gen/$f")"; cp "$gen.new/$f" "$gen/$f"; }
  done
  rm -rf "$gen.new"
}

clang_makefile() {
  local mk="$1" obj="$2" cxx="$3" flags="$4" srcs="$5" binary="${6:-}" linkflags="${7:-}"
  if [[ -n $binary ]]; then
    cat > "$mk" <<MK
CXX := $cxx
FLAGS := $flags
SRCS := $(echo $srcs)
OBJS := \$(patsubst %.cc,$obj/%.o,\$(SRCS))
$binary: \$(OBJS)
	\$(CXX) \$(OBJS) $linkflags -o \$@
$obj/%.o: %.cc
	@mkdir -p \$(@D)
	\$(CXX) \$(FLAGS) -MMD -MP -c \$< -o \$@
-include \$(OBJS:.o=.d)
MK
  else
    cat > "$mk" <<MK
CXX := $cxx
FLAGS := $flags
SRCS := $(echo $srcs)
STAMPS := \$(patsubst %.cc,$obj/%.ok,\$(SRCS))
all: \$(STAMPS)
$obj/%.ok: %.cc
	@mkdir -p \$(@D)
	@echo "  check \$<"
	@\$(CXX) \$(FLAGS) -fsyntax-only -MMD -MP -MF $obj/\$*.d -MT \$@ \$< && touch \$@
-include \$(STAMPS:.ok=.d)
MK
  fi
}
