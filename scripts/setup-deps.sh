#!/usr/bin/env bash
# Installs what minimllm needs on Debian/Ubuntu, only when missing (idempotent).
#   scripts/setup-deps.sh            Debian packages (build, run, tests, reports)
#   scripts/setup-deps.sh --openmp   also Kokkos 3.4.01 with the OpenMP backend, built from
#                                    Debian's trilinos source package into $MINIMLLM_DEPS
set -euo pipefail

deps_dir=${MINIMLLM_DEPS:-$HOME/.cache/minimllm}
want_openmp=0
for arg in "$@"; do
  case "$arg" in
    --openmp) want_openmp=1 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "setup-deps.sh: unknown argument '$arg' (valid: --openmp, --help)" >&2; exit 2 ;;
  esac
done

packages=(build-essential cmake pkg-config git libtrilinos-kokkos-dev mpich libmpich-dev
  libhdf5-mpich-dev hdf5-tools libopenblas-dev libyaml-cpp-dev libcli11-dev libfmt-dev
  libgtest-dev libbenchmark-dev python3-h5py python3-matplotlib)

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

((want_openmp)) || exit 0

kokkos_omp="$deps_dir/kokkos-openmp"
if [ -f "$kokkos_omp/lib/cmake/Kokkos/KokkosConfig.cmake" ]; then
  exit 0
fi
echo "setup-deps: building Kokkos 3.4.01 (OpenMP + Serial) into $kokkos_omp"
work="$deps_dir/src"
mkdir -p "$work/lists/partial"
uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
uri=${uri:-http://deb.debian.org/debian}
echo "deb-src $uri bookworm main" >"$work/sources.list"
apt_private=(-o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/nonexistent
  -o Dir::State::Lists="$work/lists")
if ! ls "$work"/trilinos_*.orig.tar.* >/dev/null 2>&1; then
  apt-get "${apt_private[@]}" update -qq
  (cd "$work" && apt-get "${apt_private[@]}" source --download-only trilinos >/dev/null)
fi
tarball=$(ls "$work"/trilinos_*.orig.tar.* | head -1)
rm -rf "$work/kokkos-src" && mkdir -p "$work/kokkos-src"
tar -xf "$tarball" -C "$work/kokkos-src" --strip-components=3 --wildcards '*/packages/kokkos/*'
cmake -S "$work/kokkos-src" -B "$work/kokkos-build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX="$kokkos_omp" -DKokkos_ENABLE_OPENMP=ON -DKokkos_ENABLE_SERIAL=ON \
  -DCMAKE_CXX_STANDARD=17 >/dev/null
cmake --build "$work/kokkos-build" -j "$(nproc)" >/dev/null
cmake --install "$work/kokkos-build" >/dev/null
rm -rf "$work/kokkos-build" "$work/kokkos-src"
echo "setup-deps: Kokkos OpenMP installed in $kokkos_omp"
