# Shared by the feed's own packages (homework-*, python-hwdb-client): their source is this
# repository, beside the feed, copied into the build directory instead of downloaded. The feed must
# be added with `src-link` to a checkout (README.md); HOMEWORK_SRC overrides where the checkout is.
HOMEWORK_SRC ?= $(abspath $(CURDIR)/../..)

# $(1): paths inside the repository to copy, keeping their layout (build outputs, tests and
# node_modules stay behind)
define Homework/CopySource
	$(INSTALL_DIR) $(PKG_BUILD_DIR)
	cd $(HOMEWORK_SRC) && $(CP) --parents $(1) $(PKG_BUILD_DIR)/
endef
