# Prepare the remote NVIDIA (H200) machine for our pyopencl code.
#
#   source benchmarks/device/setup.sh
#
# Installs the wheels in .device/wheels (ignored by git; carried with
# carry=[".device"]) into a --target dir without network, points the
# OpenCL ICD loader bundled in pyopencl's wheel at NVIDIA's OpenCL library
# (no /etc/OpenCL/vendors there), and prints a short platform/device summary.
# Idempotent: a second source reinstalls nothing and reuses the ICD dir.
#
# Knobs (environment): TIR_ADRENO_WHEELS (wheel dir), TIR_ADRENO_SITE
# (install target), TIR_ADRENO_PYTHON (interpreter, default python3),
# TIR_ADRENO_QUIET=1 (skip the summary).
#
# Sourced, so no `set -e` / `exit`: failures `return 1`.

_tad_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
_tad_py=${TIR_ADRENO_PYTHON:-python3}
_tad_wheels=${TIR_ADRENO_WHEELS:-$_tad_root/.device/wheels}
_tad_site=${TIR_ADRENO_SITE:-/tmp/tir_adreno_site}

# 1. wheels -> $_tad_site (skipped when the same wheel set is installed)
if ! ls "$_tad_wheels"/*.whl >/dev/null 2>&1; then
    echo "setup.sh: no wheels in $_tad_wheels (carry .device?)" >&2
    return 1
fi
_tad_stamp=$( (command -v "$_tad_py"; cd "$_tad_wheels" \
    && for _f in *.whl; do echo "$_f $(wc -c <"$_f")"; done) | md5sum | cut -c1-32)
if [ "$(cat "$_tad_site/.tir_adreno_stamp" 2>/dev/null)" != "$_tad_stamp" ]; then
    "$_tad_py" -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-index \
        --find-links "$_tad_wheels" --no-deps --no-compile --no-cache-dir \
        --upgrade --target "$_tad_site" "$_tad_wheels"/*.whl \
        || { echo "setup.sh: pip install failed" >&2; return 1; }
    echo "$_tad_stamp" > "$_tad_site/.tir_adreno_stamp"
fi
case ":${PYTHONPATH:-}:" in
    *":$_tad_site:"*) ;;
    *) export PYTHONPATH="$_tad_site${PYTHONPATH:+:$PYTHONPATH}" ;;
esac
case ":${PYTHONPATH}:" in
    *":$_tad_root:"*) ;;
    *) export PYTHONPATH="$PYTHONPATH:$_tad_root" ;;
esac

# 2. ICD vendors dir for NVIDIA's OpenCL
_tad_lib=
for _d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64; do
    if [ -e "$_d/libnvidia-opencl.so.1" ]; then _tad_lib=$_d/libnvidia-opencl.so.1; break; fi
done
if [ -z "$_tad_lib" ]; then
    _tad_lib=$(ldconfig -p 2>/dev/null | awk '/libnvidia-opencl\.so\.1 /{print $NF; exit}')
fi
if [ -n "$_tad_lib" ]; then
    _tad_icd=${TMPDIR:-/tmp}/tir_adreno_icd
    mkdir -p "$_tad_icd"
    [ "$(cat "$_tad_icd/nvidia.icd" 2>/dev/null)" = "$_tad_lib" ] \
        || echo "$_tad_lib" > "$_tad_icd/nvidia.icd"
    export OCL_ICD_VENDORS=$_tad_icd
elif [ ! -d /etc/OpenCL/vendors ]; then
    echo "setup.sh: libnvidia-opencl.so.1 not found; OpenCL may see no platform" >&2
fi

# 3. summary
if [ "${TIR_ADRENO_QUIET:-0}" != 1 ]; then
    "$_tad_py" "$_tad_root/benchmarks/device/clinfo.py" \
        || { echo "setup.sh: OpenCL summary failed" >&2; return 1; }
fi
unset _f _tad_root _tad_py _tad_wheels _tad_site _tad_stamp _tad_lib _tad_icd _d
return 0 2>/dev/null || true
