#!/usr/bin/env bash
# Steward in the shared peer harness (../shared/bench/peers), in the same run as the peers.
#
#   bash bench/peers.sh                       # Steward and the bare-loop floor, with .venv
#   PEERBENCH_VENV=DIR bash bench/peers.sh    # every peer: DIR is a venv holding the peers'
#                                             # requirements-lock.txt and `pip install -e .`
# Extra arguments go to run_bench.py (e.g. --quick, --reps 3, --out FILE).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
peers=${PEERS_DIR:-$here/../../shared/bench/peers}
[ -d "$peers" ] || { echo "peer harness not found at $peers; set PEERS_DIR" >&2; exit 2; }
if [ -n "${PEERBENCH_VENV:-}" ]; then
  python=$PEERBENCH_VENV/bin/python
  only=()
else
  python=$here/../.venv/bin/python
  only=(--only steward,bare-loop)
fi
cd "$peers"
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "$python" run_bench.py --python "$python" \
  --adapter steward=steward_adapter "${only[@]}" "$@"
