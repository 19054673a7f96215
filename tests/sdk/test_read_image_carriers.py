"""``read_image`` decoding, scaling and re-encoding every accepted format, on both carriers.

The exe carrier's Pillow is not PyPI's on Linux: the freeze builds it with only JPEG, zlib
and WebP (``wheels/hatch_build.py``, ``PILLOW_FEATURES``). Each file here is larger than
the row's bounds, so each is decoded, transposed by its EXIF orientation, scaled and
encoded again inside the runtime under test.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable
from pathlib import Path

from PIL import Image
from sdkkit import OFFLINE_PATCH

from dsh.sdk import ClientConfig, DshClient

FILES = {
    # name: (what the model is sent: media type, size)
    "wide.png": ("image/jpeg", (1568, 1045)),
    "clear.png": ("image/png", (1568, 392)),
    "turned.jpg": ("image/jpeg", (1045, 1568)),  # EXIF orientation 6: a quarter turn
    "photo.webp": ("image/jpeg", (1568, 784)),
    "moving.gif": ("image/jpeg", (1568, 78)),  # the first of two frames
}


def _images(work: Path) -> None:
    Image.new("RGB", (3000, 2000), (200, 30, 30)).save(work / "wide.png")
    Image.new("RGBA", (4000, 1000), (0, 90, 200, 128)).save(work / "clear.png")
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.new("RGB", (3000, 2000), (30, 200, 30)).save(work / "turned.jpg", exif=exif)
    Image.new("RGB", (2000, 1000), (30, 30, 200)).save(work / "photo.webp")
    frames = [Image.new("P", (2000, 100), i) for i in (1, 2)]
    frames[0].save(work / "moving.gif", save_all=True, append_images=frames[1:])


def test_every_format_is_decoded_scaled_and_encoded(real: Callable[..., ClientConfig],
                                                    tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    _images(work)
    script = [{"text": f"look at {name}",
               "tool_calls": [{"name": "read_image", "arguments": {"file_path": name}}]}
              for name in FILES]
    (tmp_path / "script.yml").write_text(json.dumps([*script, {"text": "seen"}]))
    patch = tmp_path / "images.yml"
    patch.write_text(json.dumps([{"id": "llm-scripted", "merge": {"config": {
        "script": str(tmp_path / "script.yml"), "supports_images": True}}}]))
    with DshClient(real("sdk", patches=[OFFLINE_PATCH, patch])) as client:
        result = client.new_session(cwd=work).run("look at the images")
    assert result.stop_reason == "completed", result.events[-1]
    answers = [e.data["message"] for e in result.events if e.type == "tool/result"]
    assert len(answers) == len(FILES)
    for (name, (mime, size)), answer in zip(FILES.items(), answers, strict=True):
        assert answer["isError"] is False, (name, answer)
        [image] = [block for block in answer["content"] if block["type"] == "image"]
        picture = Image.open(io.BytesIO(base64.b64decode(image["data"])))
        assert (image["mimeType"], picture.size) == (mime, size), name
        assert answer["content"][0]["text"].startswith(f"Image {name}: "), answer
