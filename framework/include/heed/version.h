// heed/version.h — library version.
#pragma once

#define HEED_VERSION_MAJOR 0
#define HEED_VERSION_MINOR 1
#define HEED_VERSION_PATCH 0
#define HEED_VERSION_STRING "0.1.0"
