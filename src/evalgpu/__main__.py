from evalgpu.cli import main

# The guard matters: vLLM starts worker processes that re-import the main module.
if __name__ == "__main__":
    raise SystemExit(main())
