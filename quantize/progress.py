"""Progress lines of the optimize and int4 stages: runtime.progress with the `[quantize]` tag."""

from functools import partial

from runtime import progress

say = partial(progress.say, tag="quantize")
step = partial(progress.step, tag="quantize")
