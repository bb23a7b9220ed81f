#!/usr/bin/env bash
# Installs what minimllm needs on Debian/Ubuntu, only when missing (idempotent).
#   scripts/setup-deps.sh            Debian packages (build, run, tests, reports)
#   scripts/setup-deps.sh --openmp   also Kokkos 3.4.01 with the OpenMP backend, built from
#                                    Debian's trilinos source package into $MINIMLLM_DEPS/kokkos-openmp
#   scripts/setup-deps.sh --cuda     also Kokkos 3.4.01 with the CUDA backend (sm_80, needs
#                                    /usr/local/cuda; no GPU) into $MINIMLLM_DEPS/kokkos-cuda
#   scripts/setup-deps.sh --kokkos4  also Kokkos 4.6.01 (Serial + OpenMP) from the vendored release
#                                    tarball (../shared/vendor, sha256 checked) into $MINIMLLM_DEPS/kokkos-4.6.01
set -euo pipefail

deps_dir=${MINIMLLM_DEPS:-$HOME/.cache/minimllm}
script_dir="$(cd "$(dirname "$0")" && pwd)"
patch_dir="$script_dir/patches"
# Third-party sources vendored next to the repository (<repo>/../shared/vendor; MINIMLLM_VENDOR overrides).
vendor_dir=${MINIMLLM_VENDOR:-$script_dir/../../shared/vendor}
kokkos4_tarball=kokkos-4.6.01.tar.gz
kokkos4_sha256=b9d70e4653b87a06dbb48d63291bf248058c7c7db4bd91979676ad5609bb1a3a
want_openmp=0
want_cuda=0
want_kokkos4=0
for arg in "$@"; do
  case "$arg" in
    --openmp) want_openmp=1 ;;
    --cuda) want_cuda=1 ;;
    --kokkos4) want_kokkos4=1 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "setup-deps.sh: unknown argument '$arg' (valid: --openmp, --cuda, --kokkos4, --help)" >&2; exit 2 ;;
  esac
done

packages=(build-essential cmake pkg-config git libtrilinos-kokkos-dev mpich libmpich-dev
  libhdf5-mpich-dev hdf5-tools libopenblas-dev libyaml-cpp-dev libcli11-dev libfmt-dev
  libgtest-dev libbenchmark-dev python3-h5py python3-matplotlib coinor-libcbc-dev)
((want_cuda)) && packages+=(patch)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup-deps: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

work="$deps_dir/src"

# Extracts Kokkos 3.4.01 from Debian's trilinos source package (downloaded once, through a private
# apt source list so the machine's apt configuration is untouched) into a fresh directory $1.
extract_kokkos_source() {
  local dest=$1
  mkdir -p "$work/lists/partial"
  if ! ls "$work"/trilinos_*.orig.tar.* >/dev/null 2>&1; then
    local uri
    uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    echo "deb-src ${uri:-http://deb.debian.org/debian} bookworm main" >"$work/sources.list"
    local apt_private=(-o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/nonexistent
      -o Dir::State::Lists="$work/lists")
    apt-get "${apt_private[@]}" update -qq
    (cd "$work" && apt-get "${apt_private[@]}" source --download-only trilinos >/dev/null)
  fi
  local tarball
  tarball=$(ls "$work"/trilinos_*.orig.tar.* | head -1)
  rm -rf "$dest" && mkdir -p "$dest"
  tar -xf "$tarball" -C "$dest" --strip-components=3 --wildcards '*/packages/kokkos/*'
}

# Extracts a Kokkos release tarball $1 (top directory stripped) into a fresh directory $2.
extract_kokkos_tarball() {
  local tarball=$1 dest=$2
  rm -rf "$dest" && mkdir -p "$dest"
  tar -xzf "$tarball" -C "$dest" --strip-components=1
}

# build_kokkos NAME DESCRIPTION PATCH|"" [cmake arguments...]: Kokkos into $deps_dir/kokkos-NAME,
# skipped when already installed with the same source, patch and arguments (a stamp file records them, so
# a changed patch or tarball rebuilds a cached Kokkos). "@SRC@" in an argument stands for the source
# directory. The source is Kokkos 3.4.01 from Debian's trilinos package, or the tarball named by
# KOKKOS_TARBALL (its sha256 in KOKKOS_TARBALL_SHA256, checked before use).
build_kokkos() {
  local name=$1 description=$2 patch_file=$3
  shift 3
  local tarball=${KOKKOS_TARBALL:-} version="3.4.01"
  local prefix="$deps_dir/kokkos-$name"
  local stamp="$prefix/minimllm-build.stamp" config
  config="$description | patch $([ -z "$patch_file" ] || sha256sum <"$patch_file" | cut -c1-16) | $*"
  if [ -n "$tarball" ]; then
    if [ ! -f "$tarball" ]; then
      echo "setup-deps: $tarball not found (Kokkos $name is built from the vendored tarball in shared/vendor next to the repository; set MINIMLLM_VENDOR to its directory)" >&2
      exit 1
    fi
    version=$(basename "$tarball" .tar.gz)
    config="$config | source $version sha256 ${KOKKOS_TARBALL_SHA256:0:16}"
  fi
  if [ -f "$prefix/lib/cmake/Kokkos/KokkosConfig.cmake" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$config" ]; then
    return 0
  fi
  if [ -n "$tarball" ] && ! echo "$KOKKOS_TARBALL_SHA256  $tarball" | sha256sum --check --status; then
    echo "setup-deps: $tarball: sha256 differs from $KOKKOS_TARBALL_SHA256 (shared/vendor/README.md); refusing to build it" >&2
    exit 1
  fi
  echo "setup-deps: building Kokkos ${version#kokkos-} ($description) into $prefix"
  rm -rf "$prefix"
  local src="$work/kokkos-src-$name" build="$work/kokkos-build-$name"
  if [ -n "$tarball" ]; then
    extract_kokkos_tarball "$tarball" "$src"
  else
    extract_kokkos_source "$src"
  fi
  [ -z "$patch_file" ] || patch -s -p1 -d "$src" <"$patch_file"
  cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
    -DCMAKE_INSTALL_LIBDIR=lib -DCMAKE_CXX_STANDARD=17 "${@//@SRC@/$src}" >/dev/null
  cmake --build "$build" -j "${MINIMLLM_BUILD_JOBS:-$(nproc)}" >/dev/null
  cmake --install "$build" >/dev/null
  rm -rf "$build" "$src"
  echo "$config" >"$stamp"
  echo "setup-deps: Kokkos ${version#kokkos-} ($description) installed in $prefix"
}

if ((want_openmp)); then
  build_kokkos openmp "OpenMP + Serial" "" -DKokkos_ENABLE_OPENMP=ON -DKokkos_ENABLE_SERIAL=ON
fi
if ((want_cuda)); then
  # The patch makes 3.4.01 build with CUDA 13 and start on GPUs newer than its arch (see its hunks). No
  # Hopper arch in 3.4: the library's own few kernels are sm_80 code with PTX, which the driver
  # JIT-compiles for sm_90 (minimllm's kernels get sm_90 machine code from scripts/build-cuda.sh). The
  # installed bin/nvcc_wrapper is the apps' compiler.
  PATH="/usr/local/cuda/bin:$PATH" build_kokkos cuda "CUDA + Serial, sm_80" \
    "$patch_dir/kokkos-3.4.01-cuda13.patch" -DCMAKE_CXX_COMPILER=@SRC@/bin/nvcc_wrapper \
    -DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_SERIAL=ON -DKokkos_ARCH_AMPERE80=ON -DKokkos_ENABLE_CUDA_LAMBDA=ON
fi
if ((want_kokkos4)); then
  # Kokkos 4.x, the versions users bring on clusters: static libraries, Release, no tests.
  KOKKOS_TARBALL="$vendor_dir/$kokkos4_tarball" KOKKOS_TARBALL_SHA256=$kokkos4_sha256 \
    build_kokkos 4.6.01 "OpenMP + Serial" "" -DKokkos_ENABLE_OPENMP=ON -DKokkos_ENABLE_SERIAL=ON \
    -DKokkos_ENABLE_TESTS=OFF -DBUILD_SHARED_LIBS=OFF
fi
