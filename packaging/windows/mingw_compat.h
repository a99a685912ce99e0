/* Force-included (-include) into llama.cpp's C/C++ files by cross_llama.sh, only when the mingw-w64
 * headers lack these (Debian 12's mingw-w64 10 does): the thread power-throttling state of the
 * Windows SDK's processthreadsapi.h, which ggml-cpu.c uses to keep Windows 11 from parking the
 * cores its threads run on. Same layout and values as the SDK's. */
#ifndef DRAFTLENS_MINGW_COMPAT_H
#define DRAFTLENS_MINGW_COMPAT_H
#define THREAD_POWER_THROTTLING_CURRENT_VERSION 1
#define THREAD_POWER_THROTTLING_EXECUTION_SPEED 0x1
#define THREAD_POWER_THROTTLING_VALID_FLAGS THREAD_POWER_THROTTLING_EXECUTION_SPEED
typedef struct _THREAD_POWER_THROTTLING_STATE {
  unsigned long Version;
  unsigned long ControlMask;
  unsigned long StateMask;
} THREAD_POWER_THROTTLING_STATE;
#endif
