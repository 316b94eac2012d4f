"""examples/python/hf_train.py's --resume takes the newest checkpoint that
was written whole: one cut short by a kill during its save (its
trainer_state.json, which the Trainer writes last, missing or half
written) is passed over for the one before.

    hf_resume_test.py EXAMPLES_PYTHON_DIR

Exit 0 when so; 77 (skipped) where transformers is not installed (the
first lane: the second lane's venv has it).
"""
import importlib.util
import json
import os
import sys
import tempfile


def main():
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("skipped: no transformers here")
        return 77
    spec = importlib.util.spec_from_file_location("hf_train", os.path.join(sys.argv[1], "hf_train.py"))
    hf_train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hf_train)
    with tempfile.TemporaryDirectory() as out:
        if hf_train.newest_whole_checkpoint(out) is not None:
            print("FAIL: a checkpoint in an empty folder")
            return 1
        for step, state in ((25, json.dumps({"global_step": 25})), (50, '{"global_step": 5'), (75, None)):
            folder = os.path.join(out, f"checkpoint-{step}")
            os.makedirs(folder)
            if state is not None:
                with open(os.path.join(folder, "trainer_state.json"), "w") as f:
                    f.write(state)
        got = hf_train.newest_whole_checkpoint(out)
        if got != os.path.join(out, "checkpoint-25"):
            print(f"FAIL: resumed from {got}, not the newest whole checkpoint (checkpoint-25)")
            return 1
    print("ok: the cut checkpoints 75 (no state) and 50 (half its state) were passed over for 25")
    return 0


if __name__ == "__main__":
    sys.exit(main())
