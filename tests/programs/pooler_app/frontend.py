import asyncio


async def encode(out):
    await asyncio.sleep(0)
    return ",".join(str(v) for v in out)
