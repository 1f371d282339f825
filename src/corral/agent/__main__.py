import sys

from corral.startup import skip_pydantic_plugins

skip_pydantic_plugins()  # before the plan's models are built

from corral.agent.main import main  # noqa: E402

sys.exit(main())
