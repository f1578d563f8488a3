#!/bin/bash
# Builds the desktop app (memscope) on the GPU machine and takes a screenshot of it under Xvfb,
# rendered by the NVIDIA driver's GLX vendor library (GPU.md section 3; the device README's
# "Headless rendering": only GLX windows under a carried Xvfb render on the GPU there).
#
#   bench/gpu_gui.sh             run from anywhere; works in the repository root
#
# Needs (carried to the machine, all ignored by git): .gl/ (the GL loaders, unpacked into / as the
# device README says), .guideps/ (glfw, imgui, stb, GL headers, Xvfb, xkbcomp, xkb data, X11
# client libraries, Mesa's swrast_dri.so with a stub libLLVM, glxinfo, DejaVu fonts) and .devdeps/.
# Everything else is unpacked into /tmp/devroot, never into /, except two harmless files whose
# paths are compiled into binaries (see install_fixed_paths). .guideps/fallback holds base
# libraries (libexpat, libbz2, libaudit, ...) used only if the image lacks them.
# bench/gpu_gui_fetch.sh fetches .gl/ and .guideps/ on an everyday machine.
#
# Build directory: build-gpu when bench/gpu.sh has already built it in this session (its
# libmemscope_model.a is reused: only viz/ and app/gui/ compile), else build-gpu-gui with the tests
# off. GUI_BUILD_DIR=DIR forces one. Results go to $OUT (the device tool's folder) when set, else to
# build-gpu-gui/out: only gui.log, glxinfo.txt and gui_cuda.png, since the device tool brings back
# at most 8 files in all; the full logs stay in /tmp/gui-logs.
#
# Status (2026-11-27, H200, Ubuntu 24.04, driver 580): everything up to the window ran (the carried
# packages unpacked, the app built, Xvfb started with its swrast driver), but NVIDIA's GLX vendor
# library found no fbconfig on this Xvfb. Step 6 now also tries EGL and, last, Mesa on the CPU
# (through GLX, then through EGL, which needs no GLX in the server).
# Exit status: 0 when the GPU rendered the screenshot, 3 when only the CPU did, 1 on failure.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-build-gpu-gui/out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOGS=/tmp/gui-logs
mkdir -p "$LOGS"
PY=${PYTHON:-python3}
JOBS=${JOBS:-$(nproc)}
# GUI_DEVROOT: only for trying this elsewhere; bench/gpu.sh and GPU.md use /tmp/devroot.
DEVROOT=${GUI_DEVROOT:-/tmp/devroot}
LIB=$DEVROOT/usr/lib/x86_64-linux-gnu
SUMMARY=$OUT/gui.log
: >"$SUMMARY"
XVFB_PID=

say() { echo "$*" | tee -a "$SUMMARY"; }
# One line saying why, then the tail of the log that shows it, then a nonzero exit.
fail() {
  say "gpu_gui: FAILED: $1"
  if [ -n "${2:-}" ] && [ -f "$2" ]; then
    say "--- last 40 lines of $2"
    tail -n 40 "$2" | tee -a "$SUMMARY"
  fi
  exit 1
}
cleanup() { [ -n "$XVFB_PID" ] && kill "$XVFB_PID" 2>/dev/null; }
trap cleanup EXIT
# Seconds since the start, for the timings in the summary.
T0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - T0 )) s"; }

# shellcheck disable=SC1091
say "gpu_gui: $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown OS}"), $(ldd --version 2>/dev/null | head -1)"
# The carried binaries are Debian 12's: they need glibc 2.35 or newer.

# --- 1. The GL loaders (libglvnd's libGL/libGLX/libOpenGL/libEGL and the Vulkan loader), into /
#        and ldconfig, exactly as the device README says; they also go into the devroot (step 2)
#        so that the -dev packages' libGL.so-style links resolve there.
ls .gl/*.deb >/dev/null 2>&1 || fail "no .gl/*.deb: carry .gl (the GL loaders)"
ls .guideps/*.deb >/dev/null 2>&1 || fail "no .guideps/*.deb: carry .guideps (the GUI's dependencies)"
for f in .gl/*.deb; do dpkg -x "$f" / || fail "dpkg -x $f / failed"; done
ldconfig

# --- 2. Everything else into /tmp/devroot. .devdeps too: bench/gpu.sh unpacks it only when
#        /tmp/devroot/usr is missing, so a devroot made here first must hold it as well.
for f in .devdeps/*.deb .gl/*.deb .guideps/*.deb; do
  [ -f "$f" ] || continue
  dpkg -x "$f" "$DEVROOT" || fail "dpkg -x $f $DEVROOT failed"
done
# Mesa's swrast_dri.so gives Xvfb its GLX extension (without a GL provider Xvfb has no GLX at
# all, and no client library, NVIDIA's included, can make a window). It links libLLVM-15, which
# with z3, libxml2 and ICU would add 45 MB; the stub in .guideps/llvm-stub (llvm15_stub.c, made by
# bench/gpu_gui_fetch.sh) lets it load, and Xvfb runs softpipe so no LLVM function is ever called.
mkdir -p "$DEVROOT/llvm-stub"
if [ -f .guideps/llvm-stub/libLLVM-15.so.1 ]; then
  cp .guideps/llvm-stub/libLLVM-15.so.1 "$DEVROOT/llvm-stub/"
else
  gcc -O1 -shared -fPIC -Wl,-soname,libLLVM-15.so.1 \
    -Wl,--version-script=<(echo 'LLVM_15 { global: *; };') \
    -o "$DEVROOT/llvm-stub/libLLVM-15.so.1" .guideps/llvm-stub/llvm15_stub.c ||
    fail "cannot build the libLLVM-15 stub from .guideps/llvm-stub/llvm15_stub.c"
fi

# --- 3. Paths compiled into binaries, filled in / only where the machine has nothing there.
install_fixed_paths() {
  # Xvfb runs "/usr/bin/xkbcomp" to compile its keymap (XkbBinDirectory is compiled in; no option
  # moves it) and dies without a keymap. A two-line wrapper runs the carried one; the xkb data
  # itself is passed with -xkbdir and stays in the devroot.
  if [ ! -x /usr/bin/xkbcomp ]; then
    # shellcheck disable=SC2016,SC2015  # $LD_LIBRARY_PATH is the wrapper's, expanded when it runs
    printf '#!/bin/sh\n# Written by memscope bench/gpu_gui.sh: the xkbcomp unpacked in %s\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' \
      "$DEVROOT" "$LIB" "$DEVROOT/usr/bin/xkbcomp" >/usr/bin/xkbcomp && chmod 755 /usr/bin/xkbcomp ||
      fail "cannot write the /usr/bin/xkbcomp wrapper"
    say "gpu_gui: wrote /usr/bin/xkbcomp (a wrapper for $DEVROOT/usr/bin/xkbcomp)"
  fi
  # The app loads the font from MEMSCOPE_FONT_PATH (app/gui/CMakeLists.txt); without it ImGui's
  # built-in bitmap font is used, which lacks the Greek letters and maths signs the panels show,
  # so the picture would not match the README's. One data file, no code.
  local font=/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
  if [ ! -f "$font" ]; then
    install -D -m 644 "$DEVROOT$font" "$font" || fail "cannot copy DejaVuSans.ttf to $font"
    say "gpu_gui: copied DejaVuSans.ttf to $font"
  fi
}
install_fixed_paths

# Does every carried binary find its libraries? A bare image may lack some that Debian 12 and the
# usual CUDA images have (libexpat, libbz2, libaudit, libgcrypt, libselinux, libsystemd and theirs):
# only then are .guideps/fallback's copies unpacked and put on the carried programs' library path
# (never for the build, so the machine's cmake and compilers keep their own).
FBLIBS=
missing_libs() {
  {
    LD_LIBRARY_PATH="$DEVROOT/llvm-stub:$LIB$FBLIBS" ldd "$DEVROOT/usr/bin/Xvfb" "$LIB/dri/swrast_dri.so"
    LD_LIBRARY_PATH="$LIB$FBLIBS" ldd "$DEVROOT/usr/bin/xkbcomp" "$DEVROOT/usr/bin/glxinfo.x86_64-linux-gnu" \
      "$LIB/libglfw.so.3" "$LIB/libEGL_mesa.so.0"
  } 2>&1 | grep "not found" | awk '{print $1}' | sort -u | tr '\n' ' '
}
missing=$(missing_libs)
if [ -n "$missing" ]; then
  say "gpu_gui: the image lacks $missing; using .guideps/fallback"
  for f in .guideps/fallback/*.deb; do [ -f "$f" ] && dpkg -x "$f" "$DEVROOT/fallback"; done
  FBLIBS=":$DEVROOT/fallback/lib/x86_64-linux-gnu:$DEVROOT/fallback/usr/lib/x86_64-linux-gnu"
  missing=$(missing_libs)
fi
[ -z "$missing" ] || fail "libraries the image lacks (add their Debian packages to .guideps): $missing"

# --- 4. Configure and build the memscope target.
TP="$("$PY" -c 'import torch;print(torch.utils.cmake_prefix_path)')" ||
  fail "$PY cannot import torch"
# The same as bench/gpu.sh: a different value would change the CUDA flags and rebuild everything.
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
# pkg-config reads only the devroot's .pc files (imgui.pc "Requires: stb"); the sysroot turns
# their prefix=/usr into -I/tmp/devroot/usr/include/imgui and -L/tmp/devroot/usr/lib/....
export PKG_CONFIG_LIBDIR="$LIB/pkgconfig:$DEVROOT/usr/share/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR=$DEVROOT
unset PKG_CONFIG_PATH
# find_package(glfw3) and FindOpenGL search CMAKE_PREFIX_PATH first: glfw3Targets.cmake computes
# its prefix from its own location, so it names /tmp/devroot/usr/lib/x86_64-linux-gnu/libglfw.so.3.3.
PREFIX="$TP;$DEVROOT/usr"
if [ -n "${GUI_BUILD_DIR:-}" ]; then
  B=$GUI_BUILD_DIR
elif [ -f build-gpu/CMakeCache.txt ] && [ -f build-gpu/model/libmemscope_model.a ]; then
  B=build-gpu
else
  B=build-gpu-gui
fi
if [ -f "$B/CMakeCache.txt" ]; then
  # An existing build (bench/gpu.sh's): turn the GUI on and leave everything else as it is.
  cmake -S . -B "$B" -DMEMSCOPE_GUI=ON -DCMAKE_PREFIX_PATH="$PREFIX" >"$LOGS/configure.log" 2>&1 ||
    fail "cmake configure of $B failed" "$LOGS/configure.log"
else
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEMSCOPE_GUI=ON -DMEMSCOPE_TESTS=OFF \
    -DCMAKE_PREFIX_PATH="$PREFIX" >"$LOGS/configure.log" 2>&1 ||
    fail "cmake configure of $B failed" "$LOGS/configure.log"
fi
grep "memscope:" "$LOGS/configure.log" | tee -a "$SUMMARY"
# Which files CMake chose: all of them should be under /tmp/devroot.
grep -E "^(glfw3_DIR|OPENGL_opengl_LIBRARY|OPENGL_glx_LIBRARY|OPENGL_INCLUDE_DIR|pkgcfg_lib_IMGUI_imgui|IMGUI_INCLUDE_DIRS)[:=]" \
  "$B/CMakeCache.txt" | sed 's/^/gpu_gui:   /' | tee -a "$SUMMARY"
say "gpu_gui: configured $B ($(elapsed)); building memscope with -j$JOBS"
# LD_LIBRARY_PATH lets ld resolve libglfw.so.3's own libX11.so.6 in the devroot.
LD_LIBRARY_PATH="$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  cmake --build "$B" -j"$JOBS" --target memscope >"$LOGS/build.log" 2>&1 || {
  grep -E "error|FAILED" "$LOGS/build.log" | head -30 | tee -a "$SUMMARY"
  fail "building memscope in $B failed" "$LOGS/build.log"
}
APP=$B/app/gui/memscope
[ -x "$APP" ] || fail "no $APP after the build" "$LOGS/build.log"
say "gpu_gui: built $APP ($(elapsed))"

# --- 5. Xvfb, with GLX from Mesa's swrast_dri.so (softpipe, the LLVM stub) on the server side.
d=99
while [ -e /tmp/.X$d-lock ] || [ -e /tmp/.X11-unix/X$d ]; do d=$((d + 1)); done
env -u __GLX_VENDOR_LIBRARY_NAME LD_LIBRARY_PATH="$DEVROOT/llvm-stub:$LIB$FBLIBS" LIBGL_DRIVERS_PATH="$LIB/dri" \
  GALLIUM_DRIVER=softpipe DRAW_USE_LLVM=0 LIBGL_DEBUG=verbose \
  "$DEVROOT/usr/bin/Xvfb" ":$d" -screen 0 1600x1000x24 -nolisten tcp -fp built-ins \
  -xkbdir "$DEVROOT/usr/share/X11/xkb" >"$LOGS/xvfb.log" 2>&1 &
XVFB_PID=$!
for _ in $(seq 50); do
  [ -S /tmp/.X11-unix/X$d ] && break
  kill -0 "$XVFB_PID" 2>/dev/null || fail "Xvfb exited at start" "$LOGS/xvfb.log"
  sleep 0.2
done
[ -S /tmp/.X11-unix/X$d ] || fail "Xvfb did not open display :$d in 10 s" "$LOGS/xvfb.log"
say "gpu_gui: Xvfb on :$d"
# Xvfb says nothing on stderr when its GLX cannot load swrast_dri.so (the clients then find no
# fbconfig): load it here the way the server does, with the server's library path, and say why not.
cat >"$LOGS/dri_probe.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char** argv) {
  for (int now = 0; now < 2; ++now) {  /* the server's RTLD_LAZY, then RTLD_NOW for unresolved symbols */
    void* h = dlopen(argv[1], (now ? RTLD_NOW : RTLD_LAZY) | RTLD_LOCAL);
    if (!h) { printf("dri_probe: dlopen(%s) failed: %s\n", now ? "NOW" : "LAZY", dlerror()); continue; }
    const void** (*get)(void) = (const void** (*)(void))dlsym(h, "__driDriverGetExtensions_swrast");
    int n = 0;
    if (get) for (const void** e = get(); e && e[n]; ++n) {}
    printf("dri_probe: dlopen(%s) ok, %d driver extensions\n", now ? "NOW" : "LAZY", n);
  }
  return 0;
}
C
if gcc -O1 -o "$LOGS/dri_probe" "$LOGS/dri_probe.c" -ldl 2>"$LOGS/dri_probe.build.log"; then
  LD_LIBRARY_PATH="$DEVROOT/llvm-stub:$LIB$FBLIBS" GALLIUM_DRIVER=softpipe DRAW_USE_LLVM=0 \
    "$LOGS/dri_probe" "$LIB/dri/swrast_dri.so" 2>&1 | head -4 | tee -a "$SUMMARY"
fi
grep -m3 -i -E "error|fail|libGL" "$LOGS/xvfb.log" | sed 's/^/gpu_gui: xvfb: /' | tee -a "$SUMMARY"

# --- 6. The clients. Four ways to a GL context, tried in order until one gives a screenshot:
#   nvidia-glx  NVIDIA's GLX vendor library (the device README's way; libglvnd would otherwise ask
#               the server, which names Mesa). On 2026-11-27 it found no fbconfig on this Xvfb.
#   nvidia-egl  the window's context through EGL (MEMSCOPE_GL_CONTEXT=egl) with NVIDIA's EGL vendor.
#   softpipe    Mesa's GLX client on the CPU (the carried libglx-mesa0 and swrast_dri.so): the model
#               still runs on CUDA and the status line says so, but the pixels are not the GPU's.
#   mesa-egl    Mesa's EGL on the CPU (the carried libegl-mesa0), which draws into the X window
#               without the server's GLX: the way left when Xvfb's own GLX did not come up (the
#               symptom of the first three failing alike, as on 2026-11-28).
# The first that writes a PNG wins; the summary says which, and the exit status is 0 only when
# the GPU rendered it.
nvlib=$(ldconfig -p | awk '/libGLX_nvidia\.so\.0/{print $NF; exit}')
NVDIR=${nvlib:+$(dirname "$nvlib")}
if [ -z "$nvlib" ]; then
  for dir in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib; do
    if [ -e "$dir/libGLX_nvidia.so.0" ]; then nvlib=$dir/libGLX_nvidia.so.0; NVDIR=$dir; break; fi
  done
fi
say "gpu_gui: NVIDIA GLX vendor library: ${nvlib:-none}"
egl_json=
for f in /usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json /usr/share/glvnd/egl_vendor.d/10_nvidia.json; do
  [ -f "$f" ] && { egl_json=$f; break; }
done
say "gpu_gui: NVIDIA EGL vendor file: ${egl_json:-none}"
export DISPLAY=:$d
export XLOCALEDIR=$DEVROOT/usr/share/X11/locale
BASE_LD="$LIB${NVDIR:+:$NVDIR}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}$FBLIBS"

# The environment of one way, as VAR=value words for env(1).
way_env() {
  case "$1" in
    nvidia-glx) echo "__GLX_VENDOR_LIBRARY_NAME=nvidia LD_LIBRARY_PATH=$BASE_LD" ;;
    nvidia-egl) echo "MEMSCOPE_GL_CONTEXT=egl __GLX_VENDOR_LIBRARY_NAME=nvidia LD_LIBRARY_PATH=$BASE_LD" \
                     "${egl_json:+__EGL_VENDOR_LIBRARY_FILENAMES=$egl_json}" ;;
    softpipe) echo "__GLX_VENDOR_LIBRARY_NAME=mesa LD_LIBRARY_PATH=$DEVROOT/llvm-stub:$BASE_LD" \
                   "LIBGL_DRIVERS_PATH=$LIB/dri GALLIUM_DRIVER=softpipe DRAW_USE_LLVM=0" ;;
    mesa-egl) echo "MEMSCOPE_GL_CONTEXT=egl __EGL_VENDOR_LIBRARY_FILENAMES=$DEVROOT/usr/share/glvnd/egl_vendor.d/50_mesa.json" \
                   "LD_LIBRARY_PATH=$DEVROOT/llvm-stub:$BASE_LD LIBGL_DRIVERS_PATH=$LIB/dri GALLIUM_DRIVER=softpipe" \
                   "DRAW_USE_LLVM=0" ;;
  esac
}

# The screenshot: the trained demo (what scripts/run opens) after 200 steps on the GPU, as in the
# README's "xvfb-run -a scripts/run --steps 200 --screenshot out.png". Sets $app_gl to the GL
# library the app maps while it runs (evidence beside glxinfo's). 240 s at most.
shoot() {
  local way=$1 shot=$2
  rm -f "$shot"
  # No timeout(1): its child's /proc/PID/maps is what the loop below reads.
  # shellcheck disable=SC2046  # way_env's words are meant to split
  env $(way_env "$way") "$APP" --ckpt assets/demo-mqar-trained.safetensors --device cuda --steps 200 \
    --screenshot "$shot" >"$LOGS/app-$way.log" 2>&1 &
  local pid=$! deadline=$(( $(date +%s) + 240 ))
  app_gl=unknown
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$app_gl" = unknown ] && [ -r "/proc/$pid/maps" ]; then
      if grep -q -e "libnvidia-glcore" -e "libnvidia-eglcore" "/proc/$pid/maps"; then app_gl=NVIDIA
      elif grep -q -e "swrast_dri" -e "libGLX_mesa" -e "libEGL_mesa" "/proc/$pid/maps"; then app_gl=Mesa
      fi
    fi
    if [ "$(date +%s)" -gt "$deadline" ]; then
      kill "$pid"; sleep 2; kill -9 "$pid" 2>/dev/null
      say "gpu_gui: $way: memscope did not finish its screenshot in 240 s"
      return 1
    fi
    sleep 0.2
  done
  wait "$pid"
  local rc=$?
  say "gpu_gui: $way: memscope exit $rc ($(elapsed)); GL library in the app: $app_gl"
  if [ "$rc" -ne 0 ] || [ ! -s "$shot" ]; then
    tail -n 5 "$LOGS/app-$way.log" | sed "s/^/gpu_gui: $way:   /" | tee -a "$SUMMARY"
    return 1
  fi
  say "gpu_gui: $way: wrote $shot ($(stat -c %s "$shot") bytes; $(od -An -tu1 -j16 -N8 "$shot" |
    awk '{printf "%dx%d", $1*16777216+$2*65536+$3*256+$4, $5*16777216+$6*65536+$7*256+$8}'))"
}

G=$DEVROOT/usr/bin/glxinfo.x86_64-linux-gnu
for way in nvidia-glx softpipe; do
  # shellcheck disable=SC2046
  env $(way_env "$way") "$G" -B >"$LOGS/glxinfo-$way.txt" 2>&1
  r=$(grep -m1 "OpenGL renderer string" "$LOGS/glxinfo-$way.txt")
  say "gpu_gui: glxinfo ($way): ${r:-$(grep -m1 -i error "$LOGS/glxinfo-$way.txt")}"
done
cat "$LOGS"/glxinfo-*.txt >"$OUT/glxinfo.txt"

rendered=
for way in nvidia-glx nvidia-egl softpipe mesa-egl; do
  if shoot "$way" "$OUT/gui_cuda.png"; then rendered=$way; break; fi
done
[ -n "$rendered" ] || fail "no way to a GL context gave a screenshot (logs: $LOGS/app-*.log)"
case "$rendered:$app_gl" in
  nvidia-*:NVIDIA) say "gpu_gui: OK: rendered on the GPU ($rendered)" ;;
  *) say "gpu_gui: the screenshot was rendered by $rendered (GL library: $app_gl), NOT on the GPU; the model ran on CUDA"
     exit 3 ;;
esac
