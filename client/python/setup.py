"""setuptools hooks of the tensord client's build (metadata is in pyproject.toml).

Contract: `build_py` writes the gRPC stubs generated from tensord.proto, and
the op facts (tensord/_op_table.py) made from the op table ops.json, into
the build tree next to the package's sources (so every wheel carries stubs
made from the proto it was built from, and the source tree never holds
them); the dependencies are the pins of the generator that ran
(build_stubs.py); an sdist carries the proto and the op table under proto/
so that it builds outside the repository too.
"""
import os
import shutil
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_stubs  # noqa: E402

GENERATOR = build_stubs.find_generator()


class BuildPyWithStubs(build_py):
    def run(self):
        super().run()
        if not self.dry_run:
            GENERATOR.generate(build_stubs.find_proto_root(), self.build_lib)
            build_stubs.write_op_table(build_stubs.find_proto_root(), self.build_lib)


class SdistWithProto(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        for name in (build_stubs.PROTO_FILE, build_stubs.OP_TABLE_FILE):
            target = os.path.join(base_dir, "proto", name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(os.path.join(build_stubs.find_proto_root(), name),
                            target)
        helper = os.path.join(base_dir, "build_stubs.py")
        if not os.path.exists(helper):
            shutil.copyfile(build_stubs.__file__, helper)


print(f"tensord: stubs by {GENERATOR.name}; requires {GENERATOR.requirements()}",
      file=sys.stderr)
setup(install_requires=GENERATOR.requirements(),
      cmdclass={"build_py": BuildPyWithStubs, "sdist": SdistWithProto})
