#!/usr/bin/env bash
# Set up this machine (idempotent) and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
npm run typecheck
# Lint and format check (biome.json): unused code, correctness rules, the one code style.
npm run lint
npm test -- "$@"
