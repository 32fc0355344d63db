"""Device names as PyTorch spells them: torch.device's counterpart.

Contract: device("cuda:0"), device("cuda", 1), device("cpu") parse into
`type` and `index` (None when not given); str() is the name ("cuda:0",
"cpu"); repr() is torch's ("device(type='cuda', index=0)"); devices compare
equal to each other and to their name. The server judges whether a device
exists; this module only checks the form (ValueError for a malformed
name, with PyTorch's wording). Stateless.
"""
import re

_NAME = re.compile(r"^([a-z]+)(?::(\d+))?$")


class device:
    __slots__ = ("type", "index")

    def __init__(self, type_or_name, index=None):
        if isinstance(type_or_name, device):
            self.type, self.index = type_or_name.type, type_or_name.index
            return
        match = _NAME.match(str(type_or_name))
        if match is None:
            raise ValueError(f"Invalid device string: '{type_or_name}'")
        self.type = match.group(1)
        self.index = int(match.group(2)) if match.group(2) is not None else index
        if match.group(2) is not None and index is not None:
            raise ValueError(f"type (string) must not include an index because index "
                             f"was passed explicitly: {type_or_name}")

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                other = device(other)
            except ValueError:
                return False
        if not isinstance(other, device):
            return NotImplemented
        return self.type == other.type and self.index == other.index

    def __hash__(self):
        return hash((self.type, self.index))


def name_of(where):
    """The wire name of a device argument (a device, a name, or an index)."""
    if where is None:
        return "cpu"
    if isinstance(where, int):
        return f"cuda:{where}"
    return str(device(where))
