#!/bin/bash
# Fetches, on an everyday Debian 12 machine, everything bench/gpu_lease.sh carries to a GPU machine
# that has no package registry: the headless build's header-only libraries into .devdeps/ (GPU.md
# section 1), and for bench/gpu_gui.sh (GPU.md section 3) the GL loaders into .gl/ and into
# .guideps/ the GUI's build and run dependencies, base libraries a bare image may lack
# (.guideps/fallback/, used only if ldd says so), and a stub libLLVM-15 (.guideps/llvm-stub/). The
# three folders are ignored by git; carry them with the device tool (carry: .devdeps .gl .guideps).
# About 23 MB in all. Run it once per checkout, before the lease.
#
#   bench/gpu_gui_fetch.sh
#
# The stub: Mesa's swrast_dri.so, which Xvfb loads for its GLX, links libLLVM-15 (with z3, libxml2
# and ICU, about 45 MB). Xvfb runs it on softpipe (GALLIUM_DRIVER=softpipe DRAW_USE_LLVM=0), which
# calls LLVM only while it loads; the stub answers those calls and aborts on any other, by name.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .git/info
for d in .devdeps .gl .guideps; do grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >>.git/info/exclude; done
mkdir -p .devdeps .gl .guideps/fallback .guideps/llvm-stub

gl=(libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
build=(libglfw3 libglfw3-dev libimgui-dev libstb0 libstb-dev libgl-dev libglx-dev libopengl-dev)
x11=(libx11-6 libx11-data libx11-xcb1 libxau6 libxcb1 libxcb-dri3-0 libxdmcp6 libxext6 libxfixes3 libxrandr2
     libxrender1 libxinerama1 libxcursor1 libxi6 libxxf86vm1 libbsd0 libmd0)
xvfb=(xvfb libxfont2 libfontenc1 libxkbfile1 libpixman-1-0 libunwind8 libfreetype6 libpng16-16 libbrotli1
      x11-xkb-utils xkb-data mesa-utils-bin fonts-dejavu-core)
# Mesa's EGL (libegl-mesa0 and what it links): the last way bench/gpu_gui.sh tries, which needs no
# GLX in the X server.
egl=(libegl-mesa0 libgbm1 libwayland-client0 libwayland-server0 libxcb-dri2-0 libxcb-present0 libxcb-sync1
     libxcb-xfixes0 libxshmfence1 libxcb-randr0 libxcb-shm0 libffi8)
dri=(libgl1-mesa-dri libglx-mesa0 libglapi-mesa libdrm2 libdrm-amdgpu1 libdrm-intel1 libdrm-nouveau2 libdrm-radeon1 libelf1
     libpciaccess0 libsensors5)
fallback=(libaudit1 libaudit-common libbz2-1.0 libcap-ng0 libcap2 libexpat1 libgcrypt20 libgpg-error0 liblz4-1
          liblzma5 libpcre2-8-0 libselinux1 libsystemd0 libzstd1 zlib1g)

(cd .devdeps && apt-get download catch2 nlohmann-json3-dev libcli11-dev libtomlplusplus-dev)
(cd .gl && apt-get download "${gl[@]}")
(cd .guideps && apt-get download "${build[@]}" "${x11[@]}" "${xvfb[@]}" "${dri[@]}" "${egl[@]}")
(cd .guideps/fallback && apt-get download "${fallback[@]}")

# The stub: every LLVM_15 symbol swrast_dri.so imports, as a function that aborts naming itself or
# (for data) a 512-byte block, except the two calls made while the driver loads.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download libllvm15 >/dev/null)
dpkg -x .guideps/libgl1-mesa-dri_*.deb "$tmp/dri"
dpkg -x "$tmp"/libllvm15_*.deb "$tmp/llvm"
nm -D --undefined-only "$tmp"/dri/usr/lib/x86_64-linux-gnu/dri/swrast_dri.so | awk '/@LLVM_15/{sub(/@.*/, "", $2); print $2}' |
  sort -u >"$tmp/imports"
nm -D --defined-only "$tmp"/llvm/usr/lib/x86_64-linux-gnu/libLLVM-15.so.1 | awk '{sub(/@.*/, "", $3); print $2, $3}' >"$tmp/kinds"
stub=.guideps/llvm-stub/llvm15_stub.c
{
  echo '/* Stub libLLVM-15.so.1 made by bench/gpu_gui_fetch.sh: what Mesa'"'"'s swrast_dri.so imports. */'
  echo '#include <stdio.h>'
  echo '#include <stdlib.h>'
  echo 'static void die(const char* n) { fprintf(stderr, "libLLVM-15 stub: %s called (run with GALLIUM_DRIVER=softpipe DRAW_USE_LLVM=0)\n", n); abort(); }'
  while read -r s; do
    case "$s" in
      LLVMIsMultithreaded | LLVMStartMultithreaded) echo "long $s(void) { return 1; }"; continue ;;
    esac
    kind=$(awk -v s="$s" '$2 == s {print $1; exit}' "$tmp/kinds")
    case "$kind" in
      T | W | i) echo "void $s(void) { die(\"$s\"); }" ;;
      "") echo "bench/gpu_gui_fetch.sh: $s is not in libLLVM-15" >&2; exit 1 ;;
      *) echo "__attribute__((aligned(64))) char $s[512];" ;;
    esac
  done <"$tmp/imports"
} >"$stub"
gcc -O1 -shared -fPIC -Wl,-soname,libLLVM-15.so.1 -Wl,--version-script=<(echo 'LLVM_15 { global: *; };') \
  -o .guideps/llvm-stub/libLLVM-15.so.1 "$stub"
du -sh .gl .guideps
