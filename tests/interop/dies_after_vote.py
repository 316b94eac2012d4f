"""Runs the script given as the first argument, except that the first
replacement of the job (a heal's; DIE_AFTER_VOTE_MARKER names a file that
says whether one came already) ends itself right after its generation's
vote said "connect", before Gloo connects: the survivors are left waiting
for its address in that generation, and the agent names the next one for
its death (round 5's connect-vote window). With
DIE_AFTER_VOTE_WHEN=published it ends after publishing its address
instead: the survivors then wait in Gloo's C++ connect."""
import os
import runpy
import sys

from ddprun import _generation

_vote = _generation._GenerationStore.vote_to_connect


def vote_then_die(self, size):
    connect = _vote(self, size)
    marker = os.environ["DIE_AFTER_VOTE_MARKER"]
    if connect and _generation._process.joining and not os.path.exists(marker):
        open(marker, "w").close()
        print(f"dies_after_vote: replacement of generation {self._generation} ends after its vote",
              file=sys.stderr, flush=True)
        os._exit(1)
    return connect


_set = _generation._GenerationStore.set


def set_then_die(self, key, value):
    """With DIE_AFTER_VOTE_WHEN=published: the first key the replacement
    sets past "connect" (its Gloo address), then the end."""
    _set(self, key, value)
    marker = os.environ["DIE_AFTER_VOTE_MARKER"]
    if self._committed and _generation._process.joining and not os.path.exists(marker):
        open(marker, "w").close()
        print(f"dies_after_vote: replacement of generation {self._generation} ends after publishing {key}",
              file=sys.stderr, flush=True)
        os._exit(1)


if os.environ.get("DIE_AFTER_VOTE_WHEN") == "published":
    _generation._GenerationStore.set = set_then_die
else:
    _generation._GenerationStore.vote_to_connect = vote_then_die
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
