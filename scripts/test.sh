#!/usr/bin/env bash
# Set up this machine (idempotent) and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
npm run typecheck
npm test -- "$@"
