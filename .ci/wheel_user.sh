#!/usr/bin/env bash
# A new user of a wheel built from this clone, outside the clone (issue #40): a fresh virtual
# environment in a temporary folder, the wheel installed into it (not editable; dependencies
# pinned by constraints.txt), then, from another temporary folder:
#   differank data=mq2008 loss=listnet trainer.max_epochs=1    ($LETOR_DIR, else ../shared/data)
#   differank task=predict ckpt_path=... files=[...]
#   differank task=export export.format=solr ckpt_path=...
#   differank.Ranker(max_epochs=1).fit(X, y, qid=q), predict, save, differank.load_ranker
# Called by .ci/run (pinned); runs alone too: .ci/wheel_user.sh [PYTHON] (default python3).
# Its environment and folders are temporary and removed when it exits.
set -euo pipefail
clone="$(cd "$(dirname "$0")/.." && pwd)"
python="${1:-python3}"
export LETOR_DIR="${LETOR_DIR:-$clone/../shared/data}"  # CI keeps the data beside the clone
unset PYTHONPATH  # the installed wheel, never a checkout's src/

environment="$(mktemp -d)"
user_folder="$(mktemp -d)"
trap 'rm -rf "$environment" "$user_folder"' EXIT
"$python" -m venv "$environment/venv"
# shellcheck disable=SC1091
source "$environment/venv/bin/activate"
python -m pip install --quiet --upgrade pip
pip wheel --quiet --no-deps --wheel-dir "$environment/wheels" "$clone"
pip install --quiet "$environment"/wheels/differank-*.whl -c "$clone/constraints.txt"

cd "$user_folder"  # the user's own folder, outside the clone
python -c 'import differank, sys; assert "site-packages" in differank.__file__, differank.__file__'
differank data=mq2008 loss=listnet trainer.max_epochs=1 quiet=true hydra.run.dir=fit
test -s fit/test_metrics.json
test_file="$(head -n 1 fit/predictions/test.sources)"  # fold 1's test part, as the run read it
differank task=predict ckpt_path=fit/checkpoints/best.ckpt "files=[$test_file]" \
    hydra.run.dir=predict
test -s predict/predictions/test.txt
differank task=export export.format=solr ckpt_path=fit/checkpoints/best.ckpt hydra.run.dir=export
test -s export/export/solr/model.json
python - <<'EOF'
import numpy as np
import torch

import differank

rng = np.random.default_rng(0)
qid = np.repeat(np.arange(40), 15)
X = rng.normal(size=(qid.size, 8)).astype(np.float32)
y = np.clip(np.round(X[:, 0] + 0.5 * rng.normal(size=qid.size)), 0, 2).astype(int)
ranker = differank.Ranker(max_epochs=1).fit(X, y, qid=qid)
scores = ranker.predict(X)
path = ranker.save("ranker.ckpt")
scorer = differank.load_ranker(path)
with torch.no_grad():
    served = scorer(torch.from_numpy(X)[None], torch.ones(1, qid.size, dtype=torch.bool))[0]
np.testing.assert_allclose(served.numpy(), scores, rtol=1e-5, atol=1e-5)
print(f"Ranker: fit, predict, save and load_ranker agree on {qid.size} rows")
EOF
deactivate
