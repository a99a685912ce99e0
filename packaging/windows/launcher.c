/* draftlens.exe (the window; built with -mwindows -DDRAFTLENS_GUI) and draftlens-cli.exe (the
 * command line; a console program) of the Windows installer. Both run the embeddable CPython that
 * sits next to them (python313.dll, its ._pth naming the import path) in this process:
 *
 *     <this exe> ARGS...   ==   python -B -X utf8 -m draftlens_boot ARGS...
 *
 * so the process, its taskbar entry and its icon are DraftLens's own. -B: the install folder is
 * read-only for the app (nothing is written into it, not even __pycache__). -X utf8: output
 * into a pipe or a file is UTF-8, as on Linux, not the ANSI code page (cp1252 cannot encode
 * most of what a model generates). draftlens_boot marks
 * the interpreter as a packaged app (sys.frozen), which makes the app start its child processes
 * (engine host, preflight, check-exact) as `<this exe> --engine-host ...` instead of `python -m`.
 * Cross-compiled on Linux by packaging/windows/build_windows.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <wchar.h>
#include <windows.h>
#include <shellapi.h>

typedef int(__cdecl *py_main_fn)(int, wchar_t **);

static int fail(const wchar_t *what, const wchar_t *path) {
  wchar_t text[2 * MAX_PATH + 200];
  _snwprintf(text, sizeof text / sizeof *text,
             L"DraftLens cannot start: %ls\n%ls\n(error %lu). Reinstall DraftLens.", what, path,
             GetLastError());
  text[sizeof text / sizeof *text - 1] = 0;
#ifdef DRAFTLENS_GUI
  MessageBoxW(NULL, text, L"DraftLens", MB_OK | MB_ICONERROR);
#else
  fwprintf(stderr, L"%ls\n", text);
#endif
  return 1;
}

static int run(void) {
  static wchar_t dir[32768], dll[32768];
  DWORD n = GetModuleFileNameW(NULL, dir, sizeof dir / sizeof *dir);
  if (n == 0 || n >= sizeof dir / sizeof *dir) return fail(L"cannot tell where it is installed", L"");
  wchar_t *slash = wcsrchr(dir, L'\\');
  if (slash) *slash = 0;
  _snwprintf(dll, sizeof dll / sizeof *dll, L"%ls\\python313.dll", dir);
  HMODULE python = LoadLibraryExW(dll, NULL, LOAD_WITH_ALTERED_SEARCH_PATH);
  if (!python) return fail(L"cannot load", dll);
  py_main_fn py_main = (py_main_fn)(void (*)(void))GetProcAddress(python, "Py_Main");
  if (!py_main) return fail(L"no Py_Main in", dll);

  int argc = 0;
  wchar_t **argv = CommandLineToArgvW(GetCommandLineW(), &argc);
  if (!argv) return fail(L"cannot read its command line", L"");
  wchar_t **args = calloc((size_t)argc + 7, sizeof *args);
  if (!args) return fail(L"out of memory", L"");
  int k = 0;
  args[k++] = argv[0];
  args[k++] = L"-B";
  args[k++] = L"-X";
  args[k++] = L"utf8";
  args[k++] = L"-m";
  args[k++] = L"draftlens_boot";
  for (int i = 1; i < argc; i++) args[k++] = argv[i];
  args[k] = NULL;
  return py_main(k, args);
}

#ifdef DRAFTLENS_GUI
int WINAPI wWinMain(HINSTANCE instance, HINSTANCE previous, PWSTR command_line, int show) {
  (void)instance;
  (void)previous;
  (void)command_line;
  (void)show;
  return run();
}
#else
int wmain(void) { return run(); }
#endif
