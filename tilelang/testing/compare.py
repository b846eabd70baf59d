"""Assertions for tests. `torch_assert_close`: two tensors are close in all but a few elements, as
the public TileLang's check (also `tilelang.utils.tensor.torch_assert_close`, its public home).
`assert_points_at`: a UserError shows the user's kernel line.

    tilelang.testing.torch_assert_close(out, ref, rtol=1e-2, atol=1e-2, max_mismatched_ratio=0.001)
    with pytest.raises(UserError, match="K of A is 64") as err:
        kernel_with_a_wrong_gemm()
    tilelang.testing.assert_points_at(err, "T.gemm(A_s, B_s")
"""

from __future__ import annotations

import os
import re


def torch_assert_close(
    tensor_a,
    tensor_b,
    rtol: float = 1e-2,
    atol: float = 1e-3,
    max_mismatched_ratio: float = 0.001,
    verbose: bool = False,
    equal_nan: bool = True,
    check_device: bool = True,
    check_dtype: bool = True,
    check_layout: bool = True,
    check_stride: bool = False,
    base_name: str = "LHS",
    ref_name: str = "RHS",
) -> bool:
    """Assert `tensor_a` is close to `tensor_b` (`torch.isclose(a, b, rtol, atol)` elementwise) in all
    but at most `max_mismatched_ratio` of the elements. Returns True when it is.

    The shapes must match, and, as the `check_*` flags say, the devices, dtypes, layouts and
    strides. Values are compared on the CPU if the devices differ and in the promoted dtype if the
    dtypes differ (unsigned types above 8 bits as int64).

    Raises: AssertionError naming the attribute that differs, or the number of mismatches, the
    first mismatch and the largest differences.
    """
    import torch

    def differ(what, a, b):
        raise AssertionError(f"{base_name} and {ref_name} differ in {what}: {a} != {b}")

    if tensor_a.shape != tensor_b.shape:
        differ("shape", tuple(tensor_a.shape), tuple(tensor_b.shape))
    if check_device and tensor_a.device != tensor_b.device:
        differ("device", tensor_a.device, tensor_b.device)
    if check_dtype and tensor_a.dtype != tensor_b.dtype:
        differ("dtype", tensor_a.dtype, tensor_b.dtype)
    if check_layout and tensor_a.layout != tensor_b.layout:
        differ("layout", tensor_a.layout, tensor_b.layout)
    if check_stride and tensor_a.layout == torch.strided and tensor_a.stride() != tensor_b.stride():
        differ("stride", tensor_a.stride(), tensor_b.stride())

    a, b = tensor_a.detach(), tensor_b.detach()
    if a.device != b.device:
        a, b = a.cpu(), b.cpu()
    if a.layout != torch.strided:
        a = a.to_dense()
    if b.layout != torch.strided:
        b = b.to_dense()
    if a.dtype != b.dtype:
        wide = {torch.uint16, torch.uint32, torch.uint64}  # promote_types refuses these
        da, db = (torch.int64 if t.dtype in wide else t.dtype for t in (a, b))
        common = torch.promote_types(da, db)
        a, b = a.to(common), b.to(common)

    mismatched = ~torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
    count, total = int(mismatched.sum()), a.numel()
    allowed = int(total * max_mismatched_ratio)
    if verbose:
        print(f"mismatched elements: {count} / {total} (allowed: {allowed})")
    if count <= allowed:
        return True
    flat = int(mismatched.reshape(-1).int().argmax())
    index = [int(i) for i in torch.unravel_index(torch.tensor(flat), tuple(a.shape))]
    av, bv = a.reshape(-1)[flat].item(), b.reshape(-1)[flat].item()
    diff = (a.double() - b.double()).abs()
    raise AssertionError(
        f"Too many mismatched elements: {count} > {allowed} ({max_mismatched_ratio:.2%} allowed, "
        f"got {count / total:.2%}).\n"
        f"First mismatch at index {index}: {base_name}={av}, {ref_name}={bv}, abs_diff={abs(av - bv)}\n"
        f"Greatest absolute difference: {diff.max().item()}, "
        f"greatest relative difference: {(diff / (b.double().abs() + 1e-12)).max().item()}\n"
        f"{base_name}: {tensor_a}\n{ref_name}: {tensor_b}"
    )


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tilelang/
# A location as errors show it (" --> file:line:col", `errors.format_location`, the kernel parser's format;
# also the older "  --> file:line"), then the source lines shown under it: " 139 |   text" and a caret line
# (or "   | text").
_WHERE = re.compile(r"^ *--> (.+?):(\d+)(?::\d+)?$")
_SHOWN = re.compile(r"^ *\d* *\|(.*)$")


def _locations(text: str) -> list[tuple[str, list[str]]]:
    """(file:line, the source lines shown under it) for each location in an error message."""
    found = []
    for line in text.splitlines():
        where = _WHERE.match(line)
        shown = _SHOWN.match(line)
        if where:
            found.append((f"{where[1]}:{where[2]}", []))
        elif shown and found and shown[1].strip(" ^~"):
            found[-1][1].append(shown[1].strip())
        elif not shown and found and found[-1][1]:
            found.append(("", []))  # the lines under a location end at the first other line
    return [(where, source) for where, source in found if where]


def locations_shown(error) -> list[tuple[str, int, str]]:
    """(file, line, the first source line shown, stripped) of each location in an error's message (a
    UserError, an ExceptionInfo or the text), in order: for tests of what a message points at."""
    text = error if isinstance(error, str) else str(error if isinstance(error, BaseException) else error.value)
    out = []
    for where, source in _locations(text):
        path, line = where.rsplit(":", 1)
        out.append((path, int(line), source[0] if source else ""))
    return out


def assert_points_at(error, fragment: str) -> None:
    """Assert that a UserError shows the user's line: a location `--> file:line` in its message is
    followed by a shown source line (`   | ...`) containing `fragment`, and that file is not one of
    tilelang's own. Both forms of location are read: tilelang's (`  --> file:line` then `   | text`)
    and the kernel parser's (` --> file:line:col` then ` 12 |   text` and a caret line).

    error: the UserError, or the ExceptionInfo of `with pytest.raises(UserError) as err`.
    fragment: text of the user's line at fault, e.g. "T.gemm(A_s, B_s".

    Raises: AssertionError that prints the error's message when no such location is shown.
    """
    text = str(error if isinstance(error, BaseException) else error.value)  # else an ExceptionInfo
    locations = _locations(text)
    for where, source in locations:
        if any(fragment in line for line in source):
            if os.path.abspath(where.rsplit(":", 1)[0]).startswith(_PACKAGE + os.sep):
                raise AssertionError(f"the error points at tilelang's own source {where}, not the user's:\n{text}")
            return
    shown = "".join(f"\n  {where}: {source}" for where, source in locations) or " none"
    raise AssertionError(
        f"the error shows no line containing {fragment!r} (locations shown:{shown}); its message:\n{text}"
    )
