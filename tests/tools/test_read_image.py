"""``read_image`` on real image files made with Pillow: format by content, scaling, byte
caps, refusals, and one real ``dsh --profile sdk`` session in which the image reaches the
(scripted) model's request."""

from __future__ import annotations

import base64
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import make_plugin, run, tools_of
from PIL import Image
from sdksession import session, text_of

from dsh.runtime.tools.base import ToolContext
from dsh.runtime.tools.images import ImageTools


@pytest.fixture
def seeing(ctx: ToolContext) -> ToolContext:
    """The session context of a route that takes images."""
    return ctx._replace(images_supported=True)


def reader(**config: Any) -> Any:
    return tools_of(make_plugin(ImageTools, **config))["read_image"]


def save(path: Path, size: tuple[int, int], fmt: str, mode: str = "RGB",
         noisy: bool = False) -> Path:
    """An image file; ``noisy`` makes it compress badly (random pixels)."""
    if noisy:
        import random

        rng = random.Random(7)
        image = Image.frombytes(mode, size, bytes(rng.getrandbits(8) for _ in
                                                  range(size[0] * size[1] * len(mode))))
    else:
        image = Image.new(mode, size, (200, 30, 30, 128)[:len(mode)])
    image.save(path, fmt)
    return path


def sent(result: Any) -> tuple[str, Image.Image]:
    """The one image of a result: its media type and the decoded picture."""
    [image] = result.images
    picture = Image.open(io.BytesIO(base64.b64decode(image.data)))
    picture.load()
    return image.mime_type, picture


def test_a_small_image_is_sent_as_it_is(seeing: ToolContext, work: Path) -> None:
    path = save(work / "small.webp", (40, 30), "WEBP")
    result = run(reader(), seeing, file_path="small.webp")
    assert not result.is_error, result.text
    assert result.text == f"Image small.webp: WEBP 40x30 px, {path.stat().st_size} bytes; " \
                          "sent as it is."
    assert result.images[0].mime_type == "image/webp"
    assert base64.b64decode(result.images[0].data) == path.read_bytes()


def test_a_large_image_is_scaled_to_the_longest_side(seeing: ToolContext, work: Path) -> None:
    save(work / "wide.png", (4000, 1000), "PNG")
    result = run(reader(), seeing, file_path="wide.png")
    mime, picture = sent(result)
    assert (mime, picture.format, picture.size) == ("image/jpeg", "JPEG", (1568, 392))
    assert result.text.startswith("Image wide.png: PNG 4000x1000 px, ")
    assert result.text.endswith(f"sent as JPEG 1568x392 px, "
                                f"{len(base64.b64decode(result.images[0].data))} bytes.")


def test_transparency_is_kept_as_png(seeing: ToolContext, work: Path) -> None:
    save(work / "clear.png", (300, 600), "PNG", mode="RGBA")
    mime, picture = sent(run(reader(max_side=100), seeing, file_path="clear.png"))
    assert (mime, picture.mode, picture.size) == ("image/png", "RGBA", (50, 100))


def test_the_byte_cap_steps_quality_then_size_down(seeing: ToolContext, work: Path) -> None:
    save(work / "noise.png", (400, 400), "PNG", mode="RGBA", noisy=True)
    result = run(reader(max_bytes=20_000), seeing, file_path="noise.png")
    mime, picture = sent(result)
    assert mime == "image/jpeg"  # noisy PNG does not fit; a flattened JPEG does
    assert len(base64.b64decode(result.images[0].data)) <= 20_000
    assert max(picture.size) < 400


def test_format_comes_from_the_content(seeing: ToolContext, work: Path) -> None:
    save(work / "really-a-png.jpg", (10, 10), "PNG")
    assert run(reader(), seeing, file_path="really-a-png.jpg").images[0].mime_type == "image/png"
    (work / "notes.png").write_text("just text\n")
    save(work / "bitmap.png", (10, 10), "BMP")
    for name in ("notes.png", "bitmap.png"):
        result = run(reader(), seeing, file_path=name)
        assert result.is_error and not result.images
        assert result.text == (f"{name} is not a PNG, JPEG, WebP or GIF image (the format is "
                               "detected from the content, not the file name)")


def test_an_animated_gif_sends_its_first_frame(seeing: ToolContext, work: Path) -> None:
    frames = [Image.new("RGB", (20, 20), c) for c in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    frames[0].save(work / "anim.gif", "GIF", save_all=True, append_images=frames[1:])
    result = run(reader(), seeing, file_path="anim.gif")
    _, picture = sent(result)
    assert picture.size == (20, 20) and getattr(picture, "n_frames", 1) == 1
    assert "3 frames" in result.text and result.text.endswith("(first frame only).")


def test_refusals(seeing: ToolContext, ctx: ToolContext, work: Path) -> None:
    save(work / "ok.png", (10, 10), "PNG")
    whole = save(work / "noise.png", (100, 100), "PNG", noisy=True).read_bytes()
    (work / "cut.png").write_bytes(whole[:len(whole) // 2])
    (work / "dir").mkdir()
    os.mkfifo(work / "pipe.png")
    cases = {"../outside.png": "path is outside the workspace root",
             "pipe.png": "not a regular file (a FIFO)",
             "dir": "dir is a directory, not an image",
             "missing.png": "no such file: missing.png",
             "cut.png": "cannot decode cut.png"}
    for path, words in cases.items():
        result = run(reader(), seeing, file_path=path)
        assert result.is_error and words in result.text, (path, result.text)
    result = run(reader(max_file_bytes=10), seeing, file_path="ok.png")
    assert result.is_error and "larger than 10 bytes" in result.text
    result = run(reader(), ctx, file_path="ok.png")  # a route without images
    assert result.is_error and not result.images
    assert "does not accept image content" in result.text


def test_read_image_in_a_real_session(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    save(work / "photo.png", (3000, 2000), "PNG")
    (work / "fake.png").write_text("not an image")
    record = tmp_path / "requests.jsonl"
    results, ends = session(tmp_path, [
        {"name": "read_image", "arguments": {"file_path": "photo.png"}},
        {"name": "read_image", "arguments": {"file_path": "fake.png"}},
    ], [], scripted={"supports_images": True, "record": str(record)}, work=work)
    assert [m["isError"] for m in results] == [False, True]
    assert text_of(results[0]).startswith("Image photo.png: PNG 3000x2000 px")
    [image] = [b for b in results[0]["content"] if b["type"] == "image"]
    picture = Image.open(io.BytesIO(base64.b64decode(image["data"])))
    assert (image["mimeType"], picture.size) == ("image/jpeg", (1568, 1045))
    assert "fake.png is not a PNG, JPEG, WebP or GIF image" in text_of(results[1])
    assert ends[-1]["data"]["reason"]["kind"] == "completed"
    requests = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(requests) == 3 and "read_image" in requests[0]["tools"]
    tool_messages = [m for m in requests[1]["messages"] if m["role"] == "tool"]
    assert tool_messages[-1]["content"][1] == image  # the model was sent the image itself


def test_a_route_without_images_gets_a_clear_error(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    save(work / "photo.png", (30, 20), "PNG")
    results, ends = session(tmp_path, [
        {"name": "read_image", "arguments": {"file_path": "photo.png"}}], [], work=work)
    assert results[0]["isError"] is True
    assert "does not accept image content" in text_of(results[0])
    assert [b["type"] for b in results[0]["content"]] == ["text"]
    assert ends[-1]["data"]["reason"]["kind"] == "completed"
