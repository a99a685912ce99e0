#!/bin/sh
# /usr/bin/draftlens: starts the bundle installed in /opt/draftlens (the window with no
# arguments; `draftlens --help` for the command line).
exec /opt/draftlens/draftlens "$@"
