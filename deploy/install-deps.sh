#!/usr/bin/env bash
# Installs adjsnap's build and test dependencies from Debian packages.
# Idempotent: skips apt entirely when every package is already present.
set -euo pipefail
packages=(
  build-essential cmake pkg-config clang
  clang-tidy                # the naming rules of .clang-tidy (tests/lint/naming.sh)
  gfortran                  # the Fortran module (client/fortran) and its test
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libucx-dev ucx-utils
  librocksdb-dev
  libzfp-dev
  libgtest-dev
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev  # config file, command lines, --json
  python3-numpy util-linux  # tests: numpy loads `adjsnap dump` output; unshare mounts a tiny tmpfs
  python3-dev python3-venv  # the Python package (client/python) and its tests, in a venv
  systemd passwd            # tests: systemd-analyze verify of the unit; useradd for two-uid tests
  slurmctld slurmd slurm-client munge  # tests: a real single-node Slurm runs deploy/slurm
  openmpi-bin libopenmpi-dev iproute2  # tests/cluster: MPI ranks on a 3-node Slurm in netns
  glusterfs-server glusterfs-client    # tests/cluster/shared_tier.sh: a GlusterFS shared spool
  openssl                   # tests: certificates for adjsnap --remote over mutual TLS
  patchelf                  # tests/gpu/pack.sh: the GPU check's pack finds its libraries in itself
  gdb                       # tests: a hung test prints the native stacks of adjsnapd and itself
  stress-ng                 # tests: tests/load/repeat_under_load.sh loads every CPU
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=""
  [[ $(id -u) -eq 0 ]] || sudo_cmd="sudo"
  echo "adjsnap: installing ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
