; DraftLens installer for Windows (NSIS 3), compiled on Linux by build_windows.sh from the install
; tree it stages (draftlens.exe, draftlens-cli.exe, the embeddable CPython, Lib\site-packages):
;
;   makensis -DSOURCE_DIR=DIR -DUNINSTALL_LIST=FILE.nsh [-DOUTFILE=setup.exe] [-DICON=x.ico] \
;     packaging/windows/draftlens.nsi
;
; UNINSTALL_LIST holds a Delete line for every installed file and an RMDir line for every folder
; (written by build_windows.sh), so the uninstaller removes exactly what was installed.
; The version is read from app/__init__.py at compile time (no second copy of it here).
; Installs per user (no administrator prompt) into %LOCALAPPDATA%\Programs\DraftLens, adds a
; Start menu shortcut, an optional desktop shortcut, and an uninstaller listed in "Apps".
; The app never writes into its install folder: settings, models and traces go to
; %LOCALAPPDATA%\DraftLens and %APPDATA%\DraftLens (platformdirs), so the uninstaller removes the
; program and leaves the user's models and settings alone.

; A 64-bit installer: the program is 64-bit only, and Wine without its 32-bit part (Debian's
; wine64, the smoke test's) cannot start a 32-bit one.
Target amd64-unicode
SetCompressor /SOLID lzma

!define APP_NAME "DraftLens"
!define APP_EXE "draftlens.exe"
!define PUBLISHER "DraftLens developers"
!define UNINST_KEY "Software\Microsoft\Windows\CurrentVersion\Uninstall\DraftLens"

; Compile-time paths: makensis runs on Windows (CI) and on Linux (check_nsis.sh).
!ifdef NSIS_WIN32_MAKENSIS
  !define /ifndef S "\"
!else
  !define /ifndef S "/"
!endif
!ifndef REPO_ROOT
  !define REPO_ROOT "..${S}.."  ; makensis works in the script's folder (no /NOCD)
!endif
!searchparse /file "${REPO_ROOT}${S}app${S}__init__.py" `__version__ = "` VERSION `"`
!ifndef VERSION
  !error "could not read __version__ from ${REPO_ROOT}${S}app${S}__init__.py"
!endif
!ifndef SOURCE_DIR
  !error "SOURCE_DIR (the staged install tree) is not set: use build_windows.sh"
!endif
!ifndef UNINSTALL_LIST
  !error "UNINSTALL_LIST (the installed files, for the uninstaller) is not set: use build_windows.sh"
!endif
!ifndef OUTFILE
  !define OUTFILE "${REPO_ROOT}${S}packaging${S}dist${S}draftlens-${VERSION}-windows-x64-setup.exe"
!endif

Name "${APP_NAME} ${VERSION}"
OutFile "${OUTFILE}"
InstallDir "$LOCALAPPDATA\Programs\${APP_NAME}"
InstallDirRegKey HKCU "Software\${APP_NAME}" "InstallDir"
RequestExecutionLevel user
ShowInstDetails nevershow
ShowUninstDetails nevershow
BrandingText "${APP_NAME} ${VERSION}"

; Version resource of the installer (Explorer's Properties > Details). VIProductVersion needs
; four numbers: "0.1.0" becomes "0.1.0.0".
!searchparse /noerrors "${VERSION}" "" V_MAJOR "." V_MINOR "." V_PATCH
!ifndef V_PATCH
  !define V_PATCH 0
!endif
VIProductVersion "${V_MAJOR}.${V_MINOR}.${V_PATCH}.0"
VIAddVersionKey "ProductName" "${APP_NAME}"
VIAddVersionKey "ProductVersion" "${VERSION}"
VIAddVersionKey "FileVersion" "${VERSION}"
VIAddVersionKey "FileDescription" "${APP_NAME} installer"
VIAddVersionKey "CompanyName" "${PUBLISHER}"
VIAddVersionKey "LegalCopyright" "MIT License"

!include "MUI2.nsh"
!include "FileFunc.nsh"
!include "x64.nsh"

!ifdef ICON
  !define MUI_ICON "${ICON}"
  !define MUI_UNICON "${ICON}"
!endif
!define MUI_ABORTWARNING
!define MUI_FINISHPAGE_RUN "$INSTDIR\${APP_EXE}"
!define MUI_FINISHPAGE_RUN_TEXT "Start ${APP_NAME}"

!insertmacro MUI_PAGE_WELCOME
!insertmacro MUI_PAGE_DIRECTORY
!insertmacro MUI_PAGE_COMPONENTS
!insertmacro MUI_PAGE_INSTFILES
!insertmacro MUI_PAGE_FINISH
!insertmacro MUI_UNPAGE_CONFIRM
!insertmacro MUI_UNPAGE_INSTFILES
!insertmacro MUI_LANGUAGE "English"

Function .onInit
  ${IfNot} ${RunningX64}
    MessageBox MB_OK|MB_ICONSTOP "${APP_NAME} needs 64-bit Windows."
    Abort
  ${EndIf}
FunctionEnd

Section "${APP_NAME}" SecApp
  SectionIn RO
  ; A previous version's files go first (its own uninstaller, run in place), so no stale library
  ; is left next to the new ones.
  ${If} ${FileExists} "$INSTDIR\uninstall.exe"
    ExecWait '"$INSTDIR\uninstall.exe" /S _?=$INSTDIR'
    Delete "$INSTDIR\uninstall.exe"
  ${EndIf}
  SetOutPath "$INSTDIR"
  File /r "${SOURCE_DIR}${S}*.*"
  WriteUninstaller "$INSTDIR\uninstall.exe"

  CreateDirectory "$SMPROGRAMS\${APP_NAME}"
  CreateShortcut "$SMPROGRAMS\${APP_NAME}\${APP_NAME}.lnk" "$INSTDIR\${APP_EXE}"

  WriteRegStr HKCU "Software\${APP_NAME}" "InstallDir" "$INSTDIR"
  WriteRegStr HKCU "${UNINST_KEY}" "DisplayName" "${APP_NAME}"
  WriteRegStr HKCU "${UNINST_KEY}" "DisplayVersion" "${VERSION}"
  WriteRegStr HKCU "${UNINST_KEY}" "Publisher" "${PUBLISHER}"
  WriteRegStr HKCU "${UNINST_KEY}" "DisplayIcon" "$INSTDIR\${APP_EXE}"
  WriteRegStr HKCU "${UNINST_KEY}" "InstallLocation" "$INSTDIR"
  WriteRegStr HKCU "${UNINST_KEY}" "UninstallString" '"$INSTDIR\uninstall.exe"'
  WriteRegStr HKCU "${UNINST_KEY}" "QuietUninstallString" '"$INSTDIR\uninstall.exe" /S'
  WriteRegDWORD HKCU "${UNINST_KEY}" "NoModify" 1
  WriteRegDWORD HKCU "${UNINST_KEY}" "NoRepair" 1
  ${GetSize} "$INSTDIR" "/S=0K" $0 $1 $2
  IntFmt $0 "0x%08X" $0
  WriteRegDWORD HKCU "${UNINST_KEY}" "EstimatedSize" "$0"
SectionEnd

Section /o "Desktop shortcut" SecDesktop
  CreateShortcut "$DESKTOP\${APP_NAME}.lnk" "$INSTDIR\${APP_EXE}"
SectionEnd

!insertmacro MUI_FUNCTION_DESCRIPTION_BEGIN
  !insertmacro MUI_DESCRIPTION_TEXT ${SecApp} "The ${APP_NAME} program (llama.cpp backend)."
  !insertmacro MUI_DESCRIPTION_TEXT ${SecDesktop} "A shortcut on the desktop."
!insertmacro MUI_FUNCTION_DESCRIPTION_END

Section "Uninstall"
  ; Only remove a folder that holds DraftLens: never an arbitrary directory picked by mistake.
  ${If} ${FileExists} "$INSTDIR\${APP_EXE}"
    !include "${UNINSTALL_LIST}"
    Delete "$INSTDIR\uninstall.exe"
    RMDir "$INSTDIR"
  ${EndIf}
  Delete "$SMPROGRAMS\${APP_NAME}\${APP_NAME}.lnk"
  RMDir "$SMPROGRAMS\${APP_NAME}"
  Delete "$DESKTOP\${APP_NAME}.lnk"
  DeleteRegKey HKCU "${UNINST_KEY}"
  DeleteRegKey HKCU "Software\${APP_NAME}"
SectionEnd
